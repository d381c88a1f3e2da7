package statuspage

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// seedStats publishes an hour of leaser records, one a minute from two replicas: local's
// proxies lease steadily and are blocked by shop.example now and then, kvm-home's are
// blocked often by tickets.example in the last half hour. Totals: see TestStatsJSON.
func (r *rig) seedStats(t *testing.T) {
	t.Helper()
	for m := 59; m >= 0; m-- {
		to := r.now.Add(-time.Duration(m) * time.Minute).UTC()
		local := events.LeaseStats{V: 1, Leaser: "replica-a", From: to.Add(-time.Minute), To: to, Rows: []events.LeaseStatsRow{
			{Proxy: "crawl-eu-1", Target: "shop.example", Provider: "local", Pool: "crawl",
				LeaseCounts: events.LeaseCounts{Granted: 4 + m%5, OK: 3, Blocked: b2i(m%10 == 0)}},
			{Proxy: "crawl-eu-2", Target: "news.example", Provider: "local", Pool: "crawl",
				LeaseCounts: events.LeaseCounts{Granted: 2, OK: 2}},
		}}
		r.publishStats(t, local)
		if m < 30 {
			kvm := events.LeaseStats{V: 1, Leaser: "replica-b", From: to.Add(-time.Minute), To: to, Rows: []events.LeaseStatsRow{
				{Proxy: "crawl-us-1", Target: "tickets.example", Provider: "kvm-home",
					LeaseCounts: events.LeaseCounts{Granted: 3, OK: 1, Blocked: 2 + m%2, Failed: b2i(m == 0)}},
			}}
			r.publishStats(t, kvm)
		}
	}
}

func (r *rig) publishStats(t *testing.T, s events.LeaseStats) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.JS.Publish(t.Context(), events.LeaseStatsSubject(s.Leaser), b); err != nil {
		t.Fatalf("publish statistics: %v", err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The sums of /api/stats.json, by each grouping, with its filters, and its bad queries.
func TestStatsJSON(t *testing.T) {
	r := newLiveRig(t)
	r.seedStats(t)
	h := r.handler(t, Config{})
	stats := func(path string) fleet.Stats {
		t.Helper()
		res, body := get(t, h, path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, res.StatusCode, body)
		}
		var st fleet.Stats
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// shop.example: 60 minutes of 3 ok and a block every tenth (m = 50, 40, ..., 0): 6 of 186.
	// tickets.example: 30 minutes of 1 ok, 2 or 3 blocked (15 each), one failed: 75 of 106.
	for _, c := range []struct {
		query string
		want  []string // key leases reports blocked failed rate, in order
		total string
	}{
		{"?by=target", []string{"tickets.example 90 106 75 1 70.8%", "shop.example 360 186 6 0 3.2%", "news.example 120 120 0 0 0.0%"},
			"(total) 570 412 81 1 19.7%"},
		{"?by=target&sort=blocked&top=1", []string{"tickets.example 90 106 75 1 70.8%"}, "(total) 570 412 81 1 19.7%"},
		{"?by=provider", []string{"kvm-home 90 106 75 1 70.8%", "local 480 306 6 0 2.0%"}, "(total) 570 412 81 1 19.7%"},
		{"?by=pool", []string{"(none) 90 106 75 1 70.8%", "crawl 480 306 6 0 2.0%"}, "(total) 570 412 81 1 19.7%"},
		{"?by=proxy&pool=crawl", []string{"crawl-eu-1 360 186 6 0 3.2%", "crawl-eu-2 120 120 0 0 0.0%"}, "(total) 480 306 6 0 2.0%"},
		{"?target=shop.example,news.example&sort=blocked", []string{"shop.example 360 186 6 0 3.2%", "news.example 120 120 0 0 0.0%"},
			"(total) 480 306 6 0 2.0%"},
	} {
		st := stats("/api/stats.json" + c.query)
		var got []string
		for _, row := range st.Rows {
			got = append(got, rowText(row))
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", c.query, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
		if tot := st.Total; rowText(fleet.StatsRow{Key: "(total)", Leases: tot.Leases, Reports: tot.Reports, Blocked: tot.Blocked,
			Failed: tot.Failed, BlockRate: tot.BlockRate}) != c.total {
			t.Errorf("%s: total %s, want %s", c.query, rowText(tot), c.total)
		}
	}
	st := stats("/api/stats.json")
	if st.Records != 90 || st.IntervalSeconds != 60 || st.By != fleet.StatsByTarget || st.Sort != fleet.SortByRate {
		t.Errorf("records %d interval %d by %s sort %s", st.Records, st.IntervalSeconds, st.By, st.Sort)
	}
	// The series: 60 one-minute buckets (an hour over 60, the leasers' interval), a line per
	// provider, and every lease in one of them.
	if st.Series.StepSeconds != 60 || len(st.Series.Starts) != 60 || len(st.Series.Providers) != 2 {
		t.Fatalf("series: step %d, %d buckets, %d providers", st.Series.StepSeconds, len(st.Series.Starts), len(st.Series.Providers))
	}
	leases, blocked := 0, 0
	for _, p := range st.Series.Providers {
		for i := range p.Leases {
			leases += p.Leases[i]
			blocked += p.Blocked[i]
		}
	}
	if leases != st.Total.Leases || blocked != st.Total.Blocked {
		t.Errorf("the series holds %d leases and %d blocks, the sums %d and %d", leases, blocked, st.Total.Leases, st.Total.Blocked)
	}
	if s := stats("/api/stats.json?step=10m").Series; s.StepSeconds != 600 || len(s.Starts) != 6 {
		t.Errorf("step=10m: %d s, %d buckets", s.StepSeconds, len(s.Starts))
	}

	// Every read deleted its consumer: a page reloading every 5 s leaves none behind.
	noConsumersLeft(t, r.store.JS, events.StreamLeaseStats)

	for query, field := range map[string]string{"?by=holder": "by", "?since=forever": "since", "?since=-1h": "since",
		"?top=x": "top", "?sort=up": "sort", "?step=2h": "step", "?step=10ms": "step"} {
		res, body := get(t, h, "/api/stats.json"+query)
		var e struct{ Error string }
		if res.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || !strings.HasPrefix(e.Error, field+" ") {
			t.Errorf("%s: %d %s, want 400 naming %s", query, res.StatusCode, body, field)
		}
	}
}

func rowText(r fleet.StatsRow) string {
	key := r.Key
	if key == "" {
		key = "(none)"
	}
	return strings.Join([]string{key, itoa(r.Leases), itoa(r.Reports), itoa(r.Blocked), itoa(r.Failed), r.RateText()}, " ")
}

func itoa(n int) string { return strconv.Itoa(n) }

// Without statistics, /api/stats.json is empty lists and the page says why there is no chart;
// with them, the page draws both panels with a line per provider and lists the most blocked
// targets.
func TestPageShowsLeaseTraffic(t *testing.T) {
	r := newLiveRig(t)
	h := r.handler(t, Config{})
	res, body := get(t, h, "/api/stats.json")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"rows": []`) || !strings.Contains(body, `"records": 0`) ||
		!strings.Contains(body, `"providers": []`) {
		t.Errorf("empty statistics: %d\n%s", res.StatusCode, body)
	}
	_, page := get(t, h, "/")
	if strings.Contains(page, "<svg") {
		t.Error("a chart is drawn without statistics")
	}
	if text := visibleText(page); strings.Contains(page, `id="blocked-targets"`) ||
		!strings.Contains(text, "No lease statistics in the last 1h yet. Each leaser publishes its sums of leases and reports when an interval ends (events.stats.interval, 1m by default).") {
		t.Errorf("empty state:\n%s", text)
	}

	r.seedStats(t)
	_, page = get(t, h, "/")
	if n := strings.Count(page, `<rect class="plot"`); n != 2 {
		t.Errorf("%d plot areas, want 2 (leases, blocked)", n)
	}
	if n := strings.Count(page, "<polyline "); n != 4 {
		t.Errorf("%d lines, want 4 (2 providers by 2 panels)", n)
	}
	for _, want := range []string{"Lease traffic, last 1h", "Leases granted (570 leases in all)", "Blocked reports (81 of 412 reports)",
		"Last 1h: 570 leases granted; 412 reports, of which 81 blocked (19.7% of reports) and 1 failed.", `stroke="` + SeriesColours[0] + `"`,
		`stroke="` + SeriesColours[1] + `"`, "in steps of 1m"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Each rate names what it is of: reports, not leases.
	rows := tableRows(t, page, "blocked-targets")
	if len(rows) != 2 || rows[0] != "tickets.example 90 106 75 1 70.8% of 106 reports" || rows[1] != "shop.example 360 186 6 0 3.2% of 186 reports" {
		t.Errorf("most blocked targets:\n%s", strings.Join(rows, "\n"))
	}
	// The page's window is its since parameter (the records were all stored just now); the
	// filter form keeps it.
	_, page = get(t, h, "/?since=10m")
	if rows := tableRows(t, page, "blocked-targets"); len(rows) != 2 || rows[0] != "tickets.example 90 106 75 1 70.8% of 106 reports" ||
		!strings.Contains(page, "Lease traffic, last 10m") || !strings.Contains(page, "in steps of 1m") {
		t.Errorf("since=10m:\n%s", strings.Join(rows, "\n"))
	}
	if !strings.Contains(page, `<input type="hidden" name="since" value="10m">`) {
		t.Error("the filter form drops since")
	}
	if res, page := get(t, h, "/?since=x"); res.StatusCode != http.StatusBadRequest || !strings.Contains(page, "since &#34;x&#34;") {
		t.Errorf("a bad since: %d", res.StatusCode)
	}
}

// noConsumersLeft waits until stream has no consumer and returns its state. Each read deletes
// its ordered consumer when done; on a loaded machine that delete (a 1 s budget) can fail, or
// the ordered consumer can have been recreated once, and the server then removes what is
// left after its InactiveThreshold (eventsConsumerIdle): either way none stays behind.
func noConsumersLeft(t *testing.T, js jetstream.JetStream, stream string) jetstream.StreamState {
	t.Helper()
	deadline := time.Now().Add(eventsConsumerIdle + 30*time.Second)
	for {
		info, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		st := info.CachedInfo().State
		if st.Consumers == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Errorf("%d consumers left on %s", st.Consumers, stream)
			return st
		}
		time.Sleep(200 * time.Millisecond)
	}
}
