package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/egressd/egressd/readside/statuspage"
)

// readerCounts is what each reader says about the fleet.
type readerCounts struct {
	phases                  map[events.Phase]int
	healthy, unhealthy, due int
	leases                  int            // every held slot
	anonymity               map[string]int // proxies with an address by verdict, "unknown" included
}

func (c readerCounts) String() string {
	return fmt.Sprintf("phases %v healthy %d unhealthy %d overdue %d leases %d anonymity %v", c.phases, c.healthy, c.unhealthy, c.due, c.leases, c.anonymity)
}

// verdictLabel is a verdict as the metric and the page's counts name it.
func verdictLabel(a events.Anonymity) string {
	if a == "" {
		return "unknown"
	}
	return string(a)
}

// For one KV state (every phase, verdicts at the current and at old addresses, stale and
// overdue probes, leases, one of a deleted proxy), `egressd status -o json`, the status page's
// /api/status.json and /metrics say the same about phases, health, anonymity verdicts, leases
// and overdue probes.
func TestStatusPageAndMetricsAgree(t *testing.T) {
	url, store, nc, want := mixedFleet(t)
	get := func(h http.Handler, path string) string {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, res.StatusCode, b)
		}
		return string(b)
	}

	// egressd status: the rows; slots of deleted proxies are in no row.
	code, out, errs := runStatus(t, "--nats-url", url, "-o", "json")
	var cliRows []fleet.Row
	if err := json.Unmarshal([]byte(out), &cliRows); code != 0 || err != nil {
		t.Fatalf("status: exit %d %v %s", code, err, errs)
	}
	cli := readerCounts{phases: map[events.Phase]int{}, anonymity: map[string]int{}}
	for _, r := range cliRows {
		if r.Address != "" {
			cli.anonymity[verdictLabel(r.Anonymity)]++
		}
		cli.phases[r.Phase]++
		cli.healthy += b2i(r.Healthy == fleet.HealthTrue)
		cli.unhealthy += b2i(r.Healthy == fleet.HealthFalse)
		cli.due += b2i(r.ProbeOverdue)
		cli.leases += r.Leases
	}
	cli.leases++ // deleted-long-ago.0: held, but its proxy has no row

	// The status page's JSON: its counts, and its rows (all on one page).
	page, err := statuspage.New(statuspage.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	var snap statuspage.Snapshot
	if err := json.Unmarshal([]byte(get(page.Handler(), "/api/status.json?per_page=1000")), &snap); err != nil {
		t.Fatal(err)
	}
	pg := readerCounts{phases: map[events.Phase]int{}, healthy: snap.Counts.Healthy, unhealthy: snap.Counts.Unhealthy,
		due: snap.Counts.ProbeOverdue, leases: snap.Counts.Leases, anonymity: map[string]int{}}
	for a, n := range snap.Counts.Anonymity {
		if n > 0 {
			pg.anonymity[a] = n
		}
	}
	for p, n := range snap.Counts.Phases {
		pg.phases[events.Phase(p)] = n
	}

	// /metrics.
	text := get(metrics.New(store, nc, true).Handler(func() error { return nil }, func() error { return nil }), "/metrics")
	met := readerCounts{phases: map[events.Phase]int{}, healthy: int(sample(t, text, "egress_proxies_healthy", "")),
		due: int(sample(t, text, "egress_proxies_probe_overdue", "")), leases: int(sample(t, text, "egress_leases_active", ""))}
	for _, p := range fleet.Phases {
		if n := int(sample(t, text, "egress_proxies", `phase="`+string(p)+`"`)); n > 0 {
			met.phases[p] = n
		}
	}
	met.unhealthy = cli.unhealthy // the metrics have no unhealthy gauge
	met.anonymity = map[string]int{}
	for _, a := range append([]events.Anonymity{""}, events.Anonymities...) {
		if n := int(sample(t, text, "egress_proxies_anonymity", `anonymity="`+verdictLabel(a)+`"`)); n > 0 {
			met.anonymity[verdictLabel(a)] = n
		}
	}

	wantCounts := readerCounts{phases: want.Phases, healthy: want.Healthy, unhealthy: want.Unhealthy, due: want.ProbeOverdue, leases: want.Leases,
		anonymity: map[string]int{}}
	for a, n := range want.Anonymity {
		wantCounts.anonymity[verdictLabel(a)] = n
	}
	for name, got := range map[string]readerCounts{"egressd status": cli, "status page": pg, "metrics": met} {
		if got.String() != wantCounts.String() {
			t.Errorf("%s: %s\nwant %s", name, got, wantCounts)
		}
	}

	// Row by row, the command and the page agree too.
	if len(snap.Proxies) != len(cliRows) {
		t.Fatalf("page has %d rows, status %d", len(snap.Proxies), len(cliRows))
	}
	for i, r := range cliRows {
		p := snap.Proxies[i]
		if a, b := rowKey(r), rowKey(p); a != b {
			t.Errorf("status %s\npage   %s", a, b)
		}
		if n := want.RowLeases[r.Name]; r.Leases != n {
			t.Errorf("%s: %d leases, want %d", r.Name, r.Leases, n)
		}
	}
}

func rowKey(r fleet.Row) string {
	return fmt.Sprintf("%s %s %s %s anonymity=%s leaked=%v mismatch=%t overdue=%t leases=%d reason=%s", r.Name, r.Phase, r.Address, r.Healthy,
		r.Anonymity, r.LeakedHeaders, r.EgressMismatch, r.ProbeOverdue, r.Leases, r.Reason)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// sample sums the samples of one metric in a Prometheus text exposition whose labels contain
// label (all of them when empty).
func sample(t *testing.T, text, name, label string) float64 {
	t.Helper()
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		m := sampleRe.FindStringSubmatch(line)
		if m == nil || m[1] != name || !strings.Contains(m[2], label) {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum, found = sum+v, true
	}
	if !found && label == "" {
		t.Fatalf("/metrics has no %s", name)
	}
	return sum
}
