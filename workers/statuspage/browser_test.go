package statuspage

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the browser test's screenshot to docs/status-page.png")

// chromiumTimeout bounds one browser run; a hung browser fails the test instead of the CI job.
const chromiumTimeout = 30 * time.Second

// chromiumPath finds Debian's chromium. Its absence fails the test: skipping would let CI pass
// without anyone having looked at the page in a browser.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("chromium is not installed: this test loads the status page in Debian's headless chromium. " +
		".ci/run installs it; on a workstation run `apt-get install -y chromium`")
	return ""
}

// runChromium loads url in headless chromium with extra flags and returns its stdout.
func runChromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	// Children that keep stdout open must not hold Wait past the timeout.
	cmd.WaitDelay = 5 * time.Second
	t.Cleanup(func() { killProcessGroup(cmd) })
	err := cmd.Run()
	killProcessGroup(cmd)
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %s\n%s", chromiumTimeout, stderr.Bytes())
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestBrowserShowsTheStatus loads the page in a real browser and checks what a person sees
// in the rendered DOM: the title, each proxy with its phase, the provider targets and the
// latest event. It also takes a screenshot (-update-screenshot copies it to the docs).
func TestBrowserShowsTheStatus(t *testing.T) {
	bin := chromiumPath(t)
	r := newRig(t)
	r.seedFleet(t)
	const title = "egressd status — lab"
	srv := httptest.NewServer(r.handler(t, Config{Title: title}))
	defer srv.Close()

	dom := string(runChromium(t, bin, srv.URL+"/", "--dump-dom"))
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

	shot := filepath.Join(t.TempDir(), "status-page.png")
	runChromium(t, bin, srv.URL+"/", "--screenshot="+shot, "--window-size=1280,900")
	checkScreenshot(t, shot)
	if *updateScreenshot {
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "status-page.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Hostile text reaches the browser as text: no script runs, no element is injected.
	r.put(t, r.store.Status, "evil", events.ProxyStatus{V: 1, Phase: events.PhaseFailed, Message: hostile, CreatedAt: r.now})
	dom = string(runChromium(t, bin, srv.URL+"/", "--dump-dom"))
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

// checkScreenshot proves the PNG is the window's size and not a blank page.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d, want 1280x900", b.Dx(), b.Dy())
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 20 {
		t.Errorf("screenshot has %d colours: a blank page?", len(colours))
	}
}

// TestBrowserDrawsLeaseTraffic loads the page with an hour of lease statistics in a real
// browser and checks, in the screenshot, that the chart's plot areas hold lines in each
// provider's colour (-update-screenshot copies it to docs/status-stats.png).
func TestBrowserDrawsLeaseTraffic(t *testing.T) {
	bin := chromiumPath(t)
	r := newRig(t)
	r.seedFleet(t)
	r.seedStats(t)
	srv := httptest.NewServer(r.handler(t, Config{Title: "egressd status — lab"}))
	defer srv.Close()

	dom := string(runChromium(t, bin, srv.URL+"/", "--dump-dom"))
	if rows := tableRows(t, dom, "blocked-targets"); len(rows) != 2 || rows[0] != "tickets.example 90 106 75 1 70.8%" {
		t.Errorf("the browser shows other blocked targets: %q", rows)
	}
	shot := filepath.Join(t.TempDir(), "status-stats.png")
	runChromium(t, bin, srv.URL+"/", "--screenshot="+shot, "--window-size=1280,1600")
	plot := checkPlot(t, shot, seriesColours[:2])
	t.Logf("plot area %v", plot)
	if *updateScreenshot {
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "status-stats.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkPlot finds the chart's plot areas in a screenshot by their background colour, which
// nothing else on the page has, and checks that each of colours (hex, "#rrggbb") is drawn
// inside them: the lines are there, not just the empty frame or the legend above it.
func checkPlot(t *testing.T, path string, colours []string) image.Rectangle {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	bg := hexColour(t, plotBackground)
	var plot image.Rectangle
	b := img.Bounds()
	for py := b.Min.Y; py < b.Max.Y; py++ {
		for px := b.Min.X; px < b.Max.X; px++ {
			if rgb(img.At(px, py)) == bg {
				plot = plot.Union(image.Rect(px, py, px+1, py+1))
			}
		}
	}
	if plot.Dx() < 600 || plot.Dy() < 150 {
		t.Fatalf("no plot area in the screenshot (background %s found over %v)", plotBackground, plot)
	}
	for _, c := range colours {
		want := hexColour(t, c)
		n := 0
		for py := plot.Min.Y; py < plot.Max.Y; py++ {
			for px := plot.Min.X; px < plot.Max.X; px++ {
				if near(rgb(img.At(px, py)), want, 24) {
					n++
				}
			}
		}
		// A line across 60 buckets in each of two panels is thousands of pixels; a stray
		// anti-aliased edge is a handful.
		if n < 500 {
			t.Errorf("the plot area has %d pixels of the series colour %s: its line is not drawn", n, c)
		}
		t.Logf("series %s: %d pixels", c, n)
	}
	return plot
}

func rgb(c color.Color) [3]int {
	r, g, b, _ := c.RGBA()
	return [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
}

func hexColour(t *testing.T, s string) [3]int {
	t.Helper()
	var c [3]int
	if _, err := fmt.Sscanf(s, "#%02x%02x%02x", &c[0], &c[1], &c[2]); err != nil {
		t.Fatalf("colour %q: %v", s, err)
	}
	return c
}

func near(a, b [3]int, tol int) bool {
	for i := range a {
		if d := a[i] - b[i]; d > tol || d < -tol {
			return false
		}
	}
	return true
}
