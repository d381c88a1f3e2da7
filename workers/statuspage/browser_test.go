package statuspage

import (
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/chromium"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the browser tests' screenshots to docs/ (status-page.png, status-stats.png)")

// TestBrowserShowsTheStatus loads the page in a real browser and checks what a person sees
// in the rendered DOM: the title, each proxy with its phase, the provider targets and the
// latest event. It also takes a screenshot (-update-screenshot copies it to the docs).
func TestBrowserShowsTheStatus(t *testing.T) {
	bin := chromium.Path(t)
	r := newRig(t)
	r.seedFleet(t)
	const title = "egressd status — lab"
	srv := httptest.NewServer(r.handler(t, Config{Title: title}))
	defer srv.Close()

	dom := string(chromium.Run(t, bin, srv.URL+"/", "--dump-dom"))
	if !strings.Contains(dom, "<title>"+title+"</title>") || !strings.Contains(dom, "<h1>"+title+"</h1>") {
		t.Errorf("the browser shows another title:\n%s", dom)
	}
	proxies := tableRows(t, dom, "proxies")
	for name, phase := range map[string]events.Phase{
		"crawl-eu-1": events.PhaseReady, "crawl-eu-2": events.PhaseUnhealthy, "crawl-eu-3": events.PhasePending,
		"crawl-us-1": events.PhaseProvisioning, "ext-office": events.PhaseReady, "bad-spec": events.PhaseInvalid,
		"broken-1": events.PhaseFailed,
	} {
		if row := rowOf(t, proxies, name); !strings.Contains(row, " "+string(phase)+" ") {
			t.Errorf("the browser shows %s without phase %s: %q", name, phase, row)
		}
	}
	if row := rowOf(t, proxies, "broken-1"); !strings.Contains(row, "storage pool default is full") {
		t.Errorf("the failed proxy's message is not shown: %q", row)
	}
	pools := tableRows(t, dom, "pools")
	if row := rowOf(t, pools, "crawl"); !strings.HasPrefix(row, "crawl Degraded 2 2 1 2 0 2h in 4h") {
		t.Errorf("pool row: %q", row)
	}
	if row := rowOf(t, pools, "batch"); !strings.HasPrefix(row, "batch Pending 4 0") {
		t.Errorf("pool row: %q", row)
	}
	targets := tableRows(t, dom, "providers")
	if row := rowOf(t, targets, "kvm-home hv2"); !strings.Contains(row, "Not ready Unreachable") {
		t.Errorf("provider row: %q", row)
	}
	if row := rowOf(t, targets, "local local"); !strings.Contains(row, "Ready Ready") {
		t.Errorf("provider row: %q", row)
	}
	evs := tableRows(t, dom, "events")
	if len(evs) == 0 || !strings.HasSuffix(evs[0], "phase crawl-us-1 Pending → Provisioning (Creating)") {
		t.Errorf("the newest event is not shown first: %q", evs)
	}
	if text := visibleText(dom); !strings.Contains(text, "Healthy 2 of 7") || strings.Contains(text, sentinelPassword) {
		t.Errorf("summary missing or a secret shown:\n%s", text)
	}

	shot, img := chromium.Screenshot(t, bin, srv.URL+"/", 1280, 900)
	if n := chromium.Colours(img, 7); n < 20 {
		t.Errorf("screenshot has %d colours: a blank page?", n)
	}
	keepScreenshot(t, shot, "status-page.png")

	// Hostile text reaches the browser as text: no script runs, no element is injected.
	r.put(t, r.store.Status, "evil", events.ProxyStatus{V: 1, Phase: events.PhaseFailed, Message: hostile, CreatedAt: r.now})
	dom = string(chromium.Run(t, bin, srv.URL+"/", "--dump-dom"))
	if !strings.Contains(dom, "<title>"+title+"</title>") {
		t.Errorf("a script in a proxy message ran and changed the title:\n%s", dom)
	}
	if strings.Contains(dom, "<script") || strings.Contains(dom, "<img") {
		t.Errorf("a proxy message injected an element:\n%s", dom)
	}
	if row := rowOf(t, tableRows(t, dom, "proxies"), "evil"); !strings.Contains(row, hostile) {
		t.Errorf("the hostile message is not shown as text: %q", row)
	}
}

// TestBrowserDrawsLeaseTraffic loads the page with an hour of lease statistics in a real
// browser and checks, in the screenshot, that the chart's plot areas hold lines in each
// provider's colour (-update-screenshot copies it to docs/status-stats.png).
func TestBrowserDrawsLeaseTraffic(t *testing.T) {
	bin := chromium.Path(t)
	r := newLiveRig(t)
	r.seedFleet(t)
	r.seedStats(t)
	srv := httptest.NewServer(r.handler(t, Config{Title: "egressd status — lab"}))
	defer srv.Close()

	dom := string(chromium.Run(t, bin, srv.URL+"/", "--dump-dom"))
	if rows := tableRows(t, dom, "blocked-targets"); len(rows) != 2 || rows[0] != "tickets.example 90 106 75 1 70.8% of 106 reports" {
		t.Errorf("the browser shows other blocked targets: %q", rows)
	}
	// A line across 60 buckets in each of two panels is thousands of pixels; a stray
	// anti-aliased edge is a handful.
	shot, img := chromium.Screenshot(t, bin, srv.URL+"/", 1280, 1600)
	chromium.CheckPlot(t, img, PlotBackground, SeriesColours[:2], 500)
	keepScreenshot(t, shot, "status-stats.png")
}

// keepScreenshot copies a screenshot to docs/name with -update-screenshot.
func keepScreenshot(t *testing.T, shot, name string) {
	t.Helper()
	if !*updateScreenshot {
		return
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
