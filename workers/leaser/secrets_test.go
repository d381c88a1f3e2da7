package leaser_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// The lease URL carries the proxy's credentials, escaped; no event and no log line does.
// Every lease transition is one event of kind lease (granted, renewed, released, expired) and
// every report one of kind report.
func TestLeaseURLCarriesCredentialsAndNothingElseDoes(t *testing.T) {
	const password = "p@ss:w/rd %SENTINEL-7f3#?"
	r := newRig(t, rawAll)
	r.seed(proxy{name: "px-auth", maxLeases: 3, auth: &[2]string{"crawl@er", password}})
	r.startLeasers(2)

	g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "a.example", TTLSeconds: 60})
	u, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); u.User.Username() != "crawl@er" || pw != password || u.Host != "127.0.0.10:3128" || u.Scheme != "http" {
		t.Fatalf("URL %s does not carry the credentials", strings.ReplaceAll(g.URL, "SENTINEL", "…"))
	}
	if strings.Contains(g.URL, password) {
		t.Fatal("the password is not escaped in the URL")
	}
	if rn, rep := r.renew(g.ID, 30); rep.code != 0 || rn.URL != g.URL {
		t.Fatalf("renew: %d, URL kept: %v", rep.code, rn.URL == g.URL)
	}
	r.report(events.ReportRequest{ID: g.ID, Result: events.ReportBlocked, Target: "b.example"})
	r.report(events.ReportRequest{ID: g.ID, Result: events.ReportOK, Release: true})
	short := r.mustAcquire(events.AcquireRequest{Holder: "c2", TTLSeconds: 1})
	failed := r.mustAcquire(events.AcquireRequest{Holder: "c3", TTLSeconds: 60})
	r.report(events.ReportRequest{ID: failed.ID, Result: events.ReportFailed})
	r.release(failed.ID)

	want := map[string]int{"lease/granted": 3, "lease/renewed": 1, "lease/released": 2, "lease/expired": 1,
		"report/blocked": 1, "report/ok": 1, "report/failed": 1}
	var got map[string]int
	eventually(t, 10*time.Second, "every event", func() bool {
		got = map[string]int{}
		for _, ev := range r.seenEvents() {
			if ev.Reason == events.ReasonExpired && ev.Lease.ID != short.ID {
				t.Errorf("expired event for %s", ev.Lease.ID)
			}
			got[string(ev.Kind)+"/"+string(ev.Reason)]++
		}
		// Each replica publishes an expiry; the core NATS copies are not deduplicated.
		got["lease/expired"] = min(got["lease/expired"], 1)
		return equalCounts(got, want)
	})
	r.mu.Lock()
	for _, b := range r.events {
		if strings.Contains(string(b), "SENTINEL") || strings.Contains(string(b), "crawl%40er:") {
			t.Errorf("an event carries the credentials: %s", strings.ReplaceAll(string(b), "SENTINEL", "…"))
		}
	}
	r.mu.Unlock()
	if logs := r.logs.String(); strings.Contains(logs, "SENTINEL") || !strings.Contains(logs, "lease granted") {
		t.Errorf("logs carry the password, or the debug log is not being captured")
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
