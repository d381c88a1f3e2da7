package statuspage

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
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

// The page lists who holds leases, most first, "(none)" for leases without a holder, and says
// how many more holders there are beyond its ten; without leases the table is left out.
func TestPageShowsHolders(t *testing.T) {
	r := newRig(t)
	h := r.handler(t, Config{})
	if _, body := get(t, h, "/"); strings.Contains(body, `id="holders"`) {
		t.Fatal("a holders table without leases")
	}
	r.seedFleet(t) // crawler-7: three leases on two proxies
	put := func(key, holder string) {
		proxy, _, _ := strings.Cut(key, ".")
		r.put(t, r.store.Leases.Of(proxy), key, events.Lease{V: 1, Proxy: proxy, Token: "t", Holder: holder,
			AcquiredAt: r.now.Add(-time.Minute), ExpiresAt: r.now.Add(time.Minute)})
	}
	put("crawl-eu-2.0", "")
	for i := range 11 {
		put(fmt.Sprintf("extra-%d.0", i), fmt.Sprintf("h%02d", i))
	}
	_, body := get(t, h, "/")
	rows := tableRows(t, body, "holders")
	if len(rows) != 10 || !strings.HasPrefix(rows[0], "crawler-7 3 2 0 0 1m in ") {
		t.Fatalf("holders rows:\n%s", strings.Join(rows, "\n"))
	}
	if !strings.Contains(visibleText(body), "And 3 more.") {
		t.Errorf("no note of the holders left out:\n%s", visibleText(body))
	}
	put("crawl-eu-3.0", "") // (none) now holds 2, second only to crawler-7
	if rows := tableRows(t, get2(t, h), "holders"); !strings.HasPrefix(rows[1], "(none) 2 2") {
		t.Errorf("holders rows:\n%s", strings.Join(rows, "\n"))
	}
}

func get2(t *testing.T, h http.Handler) string {
	t.Helper()
	_, body := get(t, h, "/")
	return body
}
