package gateway

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

func TestRules(t *testing.T) {
	r, err := ParseRules("403, 429", []string{"captcha"}, "failed")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got  hit
		want events.ReportResult
	}{
		{r.status(429), events.ReportBlocked},
		{r.status(403), events.ReportBlocked},
		{r.status(503), ""},
		{r.status(200), ""},
		{r.body([]byte("<title>Please solve this captcha</title>")), events.ReportBlocked},
		{r.body([]byte("<title>ok</title>")), ""},
		{r.unreachable(), events.ReportFailed},
		{DefaultRules().status(503), events.ReportBlocked},
		{DefaultRules().unreachable(), events.ReportBlocked},
	} {
		if c.got.result != c.want {
			t.Errorf("verdict %+v, want %q", c.got, c.want)
		}
	}
	if none, _ := ParseRules("", nil, "none"); none.unreachable().result != "" || none.status(403).result != "" {
		t.Errorf("empty rules still hit: %+v", none)
	}
	for _, bad := range []struct{ status, connect, want string }{
		{"4o3", "blocked", `"4o3"`}, {"99", "blocked", `"99"`}, {"403", "maybe", `"maybe"`},
	} {
		if _, err := ParseRules(bad.status, nil, bad.connect); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseRules(%q, %q) = %v, want an error naming %s", bad.status, bad.connect, err, bad.want)
		}
	}
	if _, err := ParseRules("", []string{""}, ""); err == nil {
		t.Errorf("an empty marker was taken")
	}
}

func TestIdempotent(t *testing.T) {
	for _, c := range []struct {
		method string
		length int64
		want   bool
	}{{"GET", 0, true}, {"HEAD", 0, true}, {"PUT", 0, true}, {"PUT", 10, false}, {"POST", 0, false}, {"PATCH", 0, false}, {"GET", -1, false}} {
		if got := idempotent(c.method, c.length); got != c.want {
			t.Errorf("idempotent(%s, %d) = %v", c.method, c.length, got)
		}
	}
}

func TestProxyStatus(t *testing.T) {
	e := gatewayError{kind: psDestUnavailable, received: 502, detail: "proxy \"de-1\" could not\nreach \\ it"}
	want := `egressd; error=destination_unavailable; received-status=502; details="proxy \"de-1\" could not?reach \\ it"`
	if got := e.proxyStatus(); got != want {
		t.Errorf("proxyStatus = %s\nwant          %s", got, want)
	}
}
