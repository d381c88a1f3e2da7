package statuspage

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// User-data and passwords live in the same spec the page reads the mode and provider from;
// neither may reach the page or the JSON.
func TestSecretsNeverShown(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{})
	for _, path := range []string{"/", "/api/status.json"} {
		_, body := get(t, h, path)
		if !strings.Contains(body, "crawl-eu-1") || !strings.Contains(body, "ext-office") || !strings.Contains(body, "batch") {
			t.Fatalf("%s does not show the proxies and pools whose specs hold the sentinels", path)
		}
		for _, secret := range []string{sentinelUserData, sentinelPassword, "cloud-config"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %q", path, secret)
			}
		}
	}
}

const hostile = `<script>document.title="pwned"</script><img src=x onerror="alert(1)">`

// A proxy message, reason, attribute or event text is data, never markup.
func TestHostileTextIsInert(t *testing.T) {
	r := newLiveRig(t)
	r.put(t, r.store.Proxies, "evil", []byte(`{"provider":"local","attributes":{"note":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}}`))
	r.put(t, r.store.Status, "evil", events.ProxyStatus{V: 1, Phase: events.PhaseFailed, Reason: hostile, Message: hostile,
		LastError: &events.LastError{Class: events.ClassPermanent, Message: hostile}, CreatedAt: r.now})
	r.put(t, r.store.Providers, "local.local", events.TargetHealth{V: 1, Provider: "local", Target: "local", Reason: hostile,
		Message: hostile, CheckedAt: r.now})
	r.publish(t, events.Event{Kind: events.KindPhase, Proxy: "evil", At: r.now, From: events.PhasePending,
		Phase: events.PhaseFailed, Reason: hostile, Message: hostile})
	// A target is whatever a crawler wrote; a provider's name comes from a spec.
	r.publishStats(t, events.LeaseStats{V: 1, Leaser: "m1", From: r.now.Add(-time.Minute), To: r.now, Rows: []events.LeaseStatsRow{
		{Proxy: "evil", Target: hostile, Provider: hostile, LeaseCounts: events.LeaseCounts{Granted: 1, Blocked: 1}}}})
	// A holder and a target are whatever a crawler wrote; a cooldown carries both.
	r.put(t, r.store.Leases.Of("evil"), "evil.0", events.Lease{V: 1, Proxy: "evil", Token: "t", Holder: hostile, Target: hostile,
		AcquiredAt: r.now, ExpiresAt: r.now.Add(time.Minute)})
	r.put(t, r.store.Cooldowns, cooldownKey("evil", hostile), events.Cooldown{V: 1, Proxy: "evil", Target: hostile,
		Result: events.ReportBlocked, Holder: hostile, Until: r.now.Add(5 * time.Minute)})
	res, body := get(t, r.handler(t, Config{}), "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	// The page has no script or image of its own, so any would be the hostile text's.
	for _, tag := range []string{"<script", "<img"} {
		if strings.Contains(strings.ToLower(body), tag) {
			t.Errorf("page contains a live %s element", tag)
		}
	}
	if n := strings.Count(body, "&lt;script&gt;"); n < 19 {
		t.Errorf("the hostile text is shown escaped %d times, want at least 19 (attribute, reason, message, last error, provider, "+
			"event, blocked target, chart legend, chart lines; on the first screen the reason, message and last error, the "+
			"cooldown's target and reporter; the cooldowns table's target and reporter; the lease holder)", n)
	}
	for _, id := range []string{"problems", "cooldowns", "holders"} {
		if rows := tableRows(t, body, id); len(rows) == 0 || !strings.Contains(rows[0], hostile) {
			t.Errorf("table %s does not show the hostile text as text: %q", id, rows)
		}
	}
	// What a person reads is the text as written.
	if !strings.Contains(visibleText(body), hostile) {
		t.Error("the hostile message is not shown as text")
	}
	// And the browser would refuse to run a script even if one slipped through.
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}

// With the connection gone, the page still renders, with a banner saying why.
func TestBannerWhenNATSIsClosed(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{Title: "fleet"})
	r.nc.Close()
	res, body := get(t, h, "/")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", res.StatusCode)
	}
	if !strings.Contains(body, `<div class="banner" role="alert">`) || !strings.Contains(body, "NATS could not be read completely") {
		t.Errorf("no error banner:\n%s", body)
	}
	if !strings.Contains(body, "connection closed") || !strings.Contains(body, "<title>fleet</title>") {
		t.Errorf("banner does not name the error, or the page lost its frame:\n%s", visibleText(body))
	}
	// Sections a failed read left empty say so, rather than "nothing yet".
	if n := strings.Count(body, "Not available: NATS could not be read."); n != 8 || strings.Contains(body, "No proxies yet") ||
		strings.Contains(body, "No lease statistics") {
		t.Errorf("%d sections marked unavailable, want 8 (pools, cooldowns, quarantine, lease holders, proxies, providers, events, lease traffic):\n%s", n, visibleText(body))
	}
	// The first screen does not call a fleet it could not read fine, nor empty.
	if v := visibleText(body); !strings.Contains(v, "Unknown: the proxies could not all be read from NATS") || !strings.Contains(body, `class="verdict bad"`) {
		t.Errorf("verdict with NATS closed:\n%s", v)
	}
	res, body = get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	// The JSON does not carry the lease statistics, so it does not read them either.
	if res.StatusCode != http.StatusServiceUnavailable || len(s.Errors) != 12 { // 11 reads, and the pools' decisions for their charts
		t.Errorf("status %d, errors %q; want 503 and one error per read", res.StatusCode, s.Errors)
	}
	if res, body := get(t, h, "/api/stats.json"); res.StatusCode != http.StatusServiceUnavailable ||
		!strings.Contains(body, `"error": "read lease statistics: nats: connection closed"`) {
		t.Errorf("/api/stats.json: %d %s, want 503 naming the read", res.StatusCode, body)
	}
}

// With the server gone and the client reconnecting, the request ends at the timeout rather
// than hanging.
func TestBannerWhenNATSIsUnreachable(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{Timeout: 500 * time.Millisecond})
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	start := time.Now()
	res, body := get(t, h, "/")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the page took %s with NATS down; the timeout is 500ms", took)
	}
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `role="alert"`) {
		t.Errorf("status %d, no banner:\n%s", res.StatusCode, visibleText(body))
	}
}
