package statuspage

import (
	"flag"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/chromium"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the browser tests' screenshots to docs/ (status-page.png, status-page-phone.png, status-stats.png)")

// TestBrowserShowsTheStatus loads the page in a real browser and checks what a person sees
// in the rendered DOM: the title, each proxy with its phase, the provider targets and the
// latest event, and that it is not a blank page in a screenshot. (The screenshot for the docs
// is TestBrowserFirstScreen's.)
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

	_, img := chromium.Screenshot(t, bin, srv.URL+"/", 1280, 900)
	if n := chromium.Colours(img, 7); n < 20 {
		t.Errorf("screenshot has %d colours: a blank page?", n)
	}

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
// browser and checks, in a screenshot scrolled to the chart (which is below the fleet), that
// its plot areas hold lines in each provider's colour (-update-screenshot copies it to
// docs/status-stats.png).
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
	var top float64
	shot, img := chromium.Inspect(t, bin, srv.URL+"/", chromium.Viewport{Width: 1280, Height: 1000},
		`(() => { document.getElementById("lease-traffic").scrollIntoView(); return document.getElementById("lease-traffic").getBoundingClientRect().top })()`, &top)
	if math.Abs(top) >= 1 {
		t.Errorf("the chart's section is at %.0f px after scrolling to it: the page ends before it fills the window?", top)
	}
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

// firstScreen is what TestBrowserFirstScreen measures in the browser, in CSS pixels: the
// viewport, how wide the document is, and where the verdict, the problems table and its
// rows, and the sections after them are.
type firstScreen struct {
	Width, Height, ScrollWidth float64
	Verdict, Problems          rect
	Rows                       []rect
	ProblemsScroll             struct{ ScrollWidth, ClientWidth float64 }
	Sections                   map[string]rect // by id
	Wide                       []string        // elements wider than the viewport outside a scrolling box
}

type rect struct{ Top, Bottom, Left, Right float64 }

// measureFirstScreen is the script that fills firstScreen.
const measureFirstScreen = `(() => {
  const r = e => { const b = e.getBoundingClientRect(); return {Top: b.top, Bottom: b.bottom, Left: b.left, Right: b.right}; };
  const byId = id => r(document.getElementById(id));
  const scroll = document.getElementById("problems").closest(".scroll");
  const sections = {};
  for (const id of ["pools", "proxies", "lease-traffic", "events"]) sections[id] = byId(id);
  return {
    Width: innerWidth, Height: innerHeight, ScrollWidth: document.documentElement.scrollWidth,
    Verdict: byId("verdict"), Problems: byId("problems"),
    Rows: [...document.querySelectorAll("#problems tbody tr")].map(r),
    ProblemsScroll: {ScrollWidth: scroll.scrollWidth, ClientWidth: scroll.clientWidth},
    Sections: sections,
    Wide: [...document.querySelectorAll("body *")].filter(e => !e.closest(".scroll") && e.getBoundingClientRect().right > innerWidth + 0.5)
      .map(e => e.tagName + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "")),
  };
})()`

// TestBrowserFirstScreen loads the seeded fleet in a real browser, at 1400×1000 and at a
// phone's 390×844, and checks in the rendered layout that the first screen answers "is my
// fleet fine": the verdict and the problems come first and are within the window (at
// 1400×1000 every problem row; on the phone the worst four), pools, proxies, the chart
// and the events after them, and nothing is wider than a phone's screen. -update-screenshot
// copies the screenshots to docs/status-page.png and docs/status-page-phone.png.
func TestBrowserFirstScreen(t *testing.T) {
	bin := chromium.Path(t)
	r := newRig(t)
	r.seedFleet(t)
	srv := httptest.NewServer(r.handler(t, Config{Title: "egressd status — lab"}))
	defer srv.Close()
	for _, c := range []struct {
		name string
		view chromium.Viewport
		rows int // how many problem rows must be within the first screen
		doc  string
	}{
		{"desktop", chromium.Viewport{Width: 1400, Height: 1000}, 7, "status-page.png"},
		// On the phone, the four that make the verdict bad: Invalid, Failed, Unhealthy, and
		// cooling down for every target.
		{"phone", chromium.Viewport{Width: 390, Height: 844, Mobile: true}, 4, "status-page-phone.png"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m firstScreen
			shot, img := chromium.Inspect(t, bin, srv.URL+"/", c.view, measureFirstScreen, &m)
			t.Logf("%+v", m)
			if m.Width != float64(c.view.Width) || m.Height != float64(c.view.Height) {
				// A phone's browser zooms out of a page wider than its screen.
				t.Fatalf("viewport %vx%v, want %dx%d: is the page wider than the screen?", m.Width, m.Height, c.view.Width, c.view.Height)
			}
			if m.ScrollWidth > m.Width || len(m.Wide) > 0 {
				t.Errorf("the page is %v px wide in a %v px viewport; wider than it: %q", m.ScrollWidth, m.Width, m.Wide)
			}
			if m.ProblemsScroll.ScrollWidth > m.ProblemsScroll.ClientWidth {
				t.Errorf("the problems table needs scrolling sideways: %v px in %v", m.ProblemsScroll.ScrollWidth, m.ProblemsScroll.ClientWidth)
			}
			if m.Verdict.Top < 0 || m.Verdict.Bottom > m.Height {
				t.Errorf("the verdict %+v is not within the first screen (%v px high)", m.Verdict, m.Height)
			}
			if len(m.Rows) != 7 {
				t.Fatalf("%d problem rows, want 7", len(m.Rows))
			}
			for i, row := range m.Rows[:c.rows] {
				if row.Bottom > m.Height {
					t.Errorf("problem row %d ends at %v px, below the first screen (%v px)", i+1, row.Bottom, m.Height)
				}
			}
			last := m.Problems.Bottom
			if m.Verdict.Bottom > m.Problems.Top {
				t.Errorf("the verdict %+v is not above the problems %+v", m.Verdict, m.Problems)
			}
			for _, id := range []string{"pools", "proxies", "lease-traffic", "events"} {
				s := m.Sections[id]
				if s.Top < last {
					t.Errorf("%s starts at %v px, above what comes before it (ends at %v px)", id, s.Top, last)
				}
				last = s.Top
			}
			if n := chromium.Colours(img, 7); n < 20 {
				t.Errorf("screenshot has %d colours: a blank page?", n)
			}
			keepScreenshot(t, shot, c.doc)
		})
	}
}
