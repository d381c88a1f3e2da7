package statuspage

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// /api/leases.json: the seeded leases by holder, one holder's alone, and no lease token.
func TestLeasesJSON(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{})
	type answer struct {
		Leases []struct {
			Proxy, Holder string
			Slot          int
		} `json:"leases"`
		Holders []struct {
			Holder          string
			Leases, Proxies int
		} `json:"holders"`
		Errors []string `json:"errors"`
	}
	read := func(path string) (int, answer, string) {
		res, body := get(t, h, path)
		var a answer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, body)
		}
		return res.StatusCode, a, body
	}
	code, a, body := read("/api/leases.json")
	if code != http.StatusOK || len(a.Leases) != 3 || len(a.Holders) != 1 || a.Holders[0].Holder != "crawler-7" ||
		a.Holders[0].Leases != 3 || a.Holders[0].Proxies != 2 || len(a.Errors) != 0 {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Contains(body, `"token"`) {
		t.Fatalf("a lease token is served: %s", body)
	}
	if code, a, body = read("/api/leases.json?holder=nobody"); code != http.StatusOK || len(a.Leases) != 0 || len(a.Holders) != 0 {
		t.Fatalf("one holder: %d %s", code, body)
	}
	r.nc.Close()
	if code, a, body = read("/api/leases.json"); code != http.StatusServiceUnavailable || len(a.Errors) != 1 ||
		!strings.Contains(a.Errors[0], "proxy_leases") {
		t.Fatalf("closed: %d %s, want 503 naming proxy_leases", code, body)
	}
}
