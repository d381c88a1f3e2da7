package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/chromium"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/statuspage"
)

// Block analytics end to end: scripted leases and reports through the real lease service of
// `egressd run`, its leaser publishing statistics every second; then `egressd stats` prints
// the exact block rates, /api/stats.json says the same, and the status page's chart is drawn
// in headless chromium.
func TestStatsEndToEnd(t *testing.T) {
	bin := chromium.Path(t)
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 88)
	appendFile(t, cfg, "events:\n  stats: {interval: 1s}\n")
	n := startNode(t, dir, "--config", cfg)
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1}`
	for _, name := range []string{"sa-1", "sa-2"} {
		n.nats("kv", "put", "proxies", name, `{"provider":"local","maxLeases":4,`+hc+`}`)
	}
	n.waitRows("both Ready", 30*time.Second, allPhase([]string{"sa-1", "sa-2"}, events.PhaseReady))

	if out := n.egressd("stats"); !strings.HasPrefix(out, "No lease statistics in the last 1h.") || !strings.Contains(out, "events.stats.interval") {
		t.Errorf("before any lease:\n%s", out)
	}

	nc, _ := n.client()
	c := client.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acquire := func(target string) events.LeaseGrant {
		t.Helper()
		g, err := c.AcquireOnce(ctx, client.AcquireOptions{Target: target, Holder: "e2e-stats", TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire for %q: %v", target, err)
		}
		return g
	}
	report := func(g events.LeaseGrant, target string, results ...events.ReportResult) {
		t.Helper()
		for _, r := range results {
			if _, err := c.Report(ctx, g.ID, r, target); err != nil {
				t.Fatalf("report %s on %s: %v", r, target, err)
			}
			// Spread over a few of the leaser's one-second intervals, so the chart has a
			// series to draw, not one point.
			time.Sleep(300 * time.Millisecond)
		}
	}
	a, b, none := acquire("a.example"), acquire("b.example"), acquire("")
	report(a, "a.example", events.ReportBlocked, events.ReportOK, events.ReportBlocked, events.ReportBlocked)
	report(b, "b.example", events.ReportOK, events.ReportBlocked, events.ReportOK, events.ReportFailed)
	for _, g := range []events.LeaseGrant{a, b, none} {
		if _, err := c.Release(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
	}

	// The last sums are in once the interval of the last report has ended.
	var st fleet.Stats
	waitUntil(t, "the statistics of 8 reports and 3 releases", 15*time.Second, func() (bool, string) {
		st = fleet.Stats{}
		_ = json.Unmarshal([]byte(n.egressd("stats", "--json")), &st)
		return st.Total.Reports == 8 && st.Total.Leases == 3, fmt.Sprintf("%+v", st.Total)
	})

	out := n.egressd("stats")
	header, table, _ := strings.Cut(out, "\n")
	if !regexp.MustCompile(`^Block rate by target over the last 1h, highest block rate first \(\d+ leaser records, one per 1s; `).MatchString(header) {
		t.Errorf("header: %s", header)
	}
	want := "" +
		"TARGET        LEASES   REPORTS   BLOCKED   FAILED   BLOCK RATE\n" +
		"a.example     1        4         3         0        75.0%\n" +
		"b.example     1        4         1         1        25.0%\n" +
		"(no target)   1        0         0         0        -\n" +
		"(total)       3        8         4         1        50.0%\n"
	if table != want {
		t.Errorf("egressd stats:\n%s\nwant\n%s", table, want)
	}
	if out := n.egressd("stats", "--by", "provider"); !strings.Contains(out, "\nlocal      3        8         4         1        50.0%\n") {
		t.Errorf("by provider:\n%s", out)
	}
	if out := n.egressd("stats", "--by", "target", "--sort", "blocked", "--top", "1", "--target", "a.example,b.example"); !strings.Contains(out, "\na.example   1        4         3         0        75.0%\n(total)     2        8         4         1        50.0%\n1 more (--top 0 shows all).\n") {
		t.Errorf("filtered, top 1:\n%s", out)
	}

	// The status page's /api/stats.json: the same read model, the same numbers.
	ui := n.uiURL()
	for _, by := range []string{"target", "proxy", "provider", "pool"} {
		var cli, page fleet.Stats
		if err := json.Unmarshal([]byte(n.egressd("stats", "--json", "--by", by)), &cli); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(httpGet(t, ui+"api/stats.json?by="+by)), &page); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cli.Rows, page.Rows) || cli.Total != page.Total || len(cli.Rows) == 0 {
			t.Errorf("by %s: egressd stats %+v %+v\n/api/stats.json %+v %+v", by, cli.Rows, cli.Total, page.Rows, page.Total)
		}
	}

	// The chart, over the last minute in one-second steps, in a real browser. The page is
	// taller than the window since the lease-key and cooldown tables grew: 3200 px holds it.
	_, img := chromium.Screenshot(t, bin, ui+"?since=1m", 1280, 3200)
	chromium.CheckPlot(t, img, statuspage.PlotBackground, statuspage.SeriesColours[:1], 100)
	dom := string(chromium.Run(t, bin, ui+"?since=1m", "--dump-dom"))
	if !strings.Contains(dom, "a.example") || !strings.Contains(dom, "75.0%") {
		t.Errorf("the page does not list a.example at 75.0%%")
	}
}

// uiURL is where the node serves its status page, from its log.
func (n *node) uiURL() string {
	n.t.Helper()
	m := regexp.MustCompile(`msg="serving the status page" .*?url=(http://\S+/)`).FindStringSubmatch(n.logs())
	if m == nil {
		n.t.Fatal("the node does not say where its status page is")
	}
	return m[1]
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", url, res.StatusCode, b)
	}
	return string(b)
}
