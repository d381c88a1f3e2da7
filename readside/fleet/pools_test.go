package fleet_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

// poolLine is a pool row as fleettest.PoolWant writes it.
func poolLine(p fleet.PoolRow) string {
	return fmt.Sprintf("%s %s %d %d %d %d %s", p.Phase, p.DesiredText(), p.Members, p.Ready, p.Leased, p.Draining, p.Oldest)
}

func TestLoadPools(t *testing.T) {
	st := newStore(t)
	now := time.Now()
	want := fleettest.Pools(t, st, now)
	f := load(t, fleet.FromStore(st), now)
	if len(f.Errors) != 0 {
		t.Fatalf("errors: %v", f.Errors)
	}
	got := map[string]string{}
	var names []string
	for _, p := range f.Pools {
		got[p.Name] = poolLine(p)
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "broken crawl old web" || fmt.Sprint(got) != fmt.Sprint(map[string]string(want)) {
		t.Errorf("pools %v\n got %v\nwant %v", names, got, want)
	}
	byName := map[string]fleet.PoolRow{}
	for _, p := range f.Pools {
		byName[p.Name] = p
	}
	if p := byName["broken"]; p.Reason != events.ReasonInvalidSpec || !strings.HasPrefix(p.Message, "replicas: is required") || p.Status != nil {
		t.Errorf("broken: %+v", p)
	}
	if p := byName["crawl"]; p.Reason != events.ReasonMaxAge || p.Status == nil || len(p.Status.Members) != 4 ||
		!p.NextRotation.Equal(p.Status.NextRotation) || p.NextRotation.IsZero() {
		t.Errorf("crawl: %+v", p)
	}
	if tot := f.Totals; tot.Pools != 4 || tot.PoolPhases[events.PoolProgressing] != 1 || tot.PoolPhases[fleet.PoolPending] != 1 {
		t.Errorf("totals %+v", tot)
	}
	// Members name their pool; the draining member is not lease capacity.
	for _, r := range f.Rows {
		wantPool := strings.SplitN(r.Name, "-", 2)[0]
		if r.Pool != wantPool {
			t.Errorf("%s: pool %q, want %q", r.Name, r.Pool, wantPool)
		}
		if r.Drain != (r.Name == "crawl-aaaaa") {
			t.Errorf("%s: drain %t", r.Name, r.Drain)
		}
	}
	if f.Totals.LeaseCapacity != 3*2 || f.Totals.Phases[events.PhaseDraining] != 1 {
		t.Errorf("capacity %d (want the 3 Ready members' 6), phases %v", f.Totals.LeaseCapacity, f.Totals.Phases)
	}
	if rows := f.Select(mustFilter(t, fleet.FilterInput{Pools: []string{"crawl"}})); len(rows) != 4 {
		t.Errorf("--pool crawl: %d rows", len(rows))
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), fleettest.SentinelPoolSecret) || strings.Contains(string(b), "cloud-config") {
		t.Error("the model holds a template's password or user-data")
	}
}

// A reader not allowed to read specs (nor pools) gets its pools from the controller's
// statuses, and members from the ledgers.
func TestLoadPoolsWithoutSpecs(t *testing.T) {
	st := newStore(t)
	now := time.Now()
	fleettest.Pools(t, st, now)
	b := fleet.FromStore(st)
	b.Proxies, b.Pools = nil, nil
	f := load(t, b, now)
	got := map[string]string{}
	for _, p := range f.Pools {
		got[p.Name] = poolLine(p)
	}
	// Without the specs the drain mark is unknown; the reconciler's phase still says it.
	want := map[string]string{"crawl": "Progressing ? 4 3 3 1 5h", "old": "Deleting - 1 0 0 0 2d"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// Pools decode as strictly as the controller parses them; no spec makes Load fail or panic.
func TestLoadPoolsBadSpecs(t *testing.T) {
	st := newStore(t)
	now := time.Now()
	for name, spec := range map[string]string{
		"notjson":                            `{`,
		"extra":                              `{"replicas":1,"template":{"provider":"local"},"surge":2}`,
		"external":                           `{"replicas":1,"template":{"mode":"external","endpoint":{"host":"192.0.2.1"}}}`,
		"negative":                           `{"replicas":-1,"template":{"provider":"local"}}`,
		"toolong-" + strings.Repeat("a", 55): `{"replicas":1,"template":{"provider":"local"}}`,
		"v2":                                 `{"v":2}`,
	} {
		fleettest.Put(t, st.Pools, name, []byte(spec))
	}
	f := load(t, fleet.FromStore(st), now)
	if len(f.Pools) != 6 {
		t.Fatalf("%d pools", len(f.Pools))
	}
	for _, p := range f.Pools {
		if p.Phase != events.PoolInvalid || p.Message == "" || strings.Contains(p.Message, "\n") {
			t.Errorf("%s: %s %q", p.Name, p.Phase, p.Message)
		}
	}
}

func mustFilter(t *testing.T, in fleet.FilterInput) fleet.Filter {
	t.Helper()
	f, err := fleet.ParseFilter(in)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestUntil(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now.Add(-time.Second), "due"},
		{now, "due"},
		{now.Add(45 * time.Second), "in 45s"},
		{now.Add(150 * time.Minute), "in 2h"},
		{now.Add(72 * time.Hour), "in 3d"},
	} {
		if got := fleet.Until(now, c.t); got != c.want {
			t.Errorf("Until(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestPoolDesiredText(t *testing.T) {
	three := 3
	for _, c := range []struct {
		name string
		row  fleet.PoolRow
		want string
	}{
		{"the spec's replicas", fleet.PoolRow{Phase: events.PoolReady, Desired: &three}, "3"},
		{"a spec again over a Deleting status", fleet.PoolRow{Phase: events.PoolDeleting, Desired: &three}, "3"},
		{"a tombstone: spec deleted, status Deleting", fleet.PoolRow{Phase: events.PoolDeleting}, "-"},
		{"a spec that does not parse", fleet.PoolRow{Phase: events.PoolInvalid}, "?"},
		{"a spec the reader may not read", fleet.PoolRow{Phase: events.PoolProgressing}, "?"},
	} {
		if got := c.row.DesiredText(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRowLeasesText(t *testing.T) {
	three := 3
	for _, c := range []struct {
		name string
		row  fleet.Row
		want string
	}{
		{"the spec's maxLeases", fleet.Row{Phase: events.PhaseReady, Leases: 2, MaxLeases: &three}, "2/3"},
		{"a tombstone: spec deleted, status Deleting", fleet.Row{Phase: events.PhaseDeleting, Leases: 1}, "1/-"},
		{"a spec that does not parse", fleet.Row{Phase: events.PhaseInvalid}, "0/?"},
		{"a spec the reader may not read", fleet.Row{Phase: events.PhaseReady, Leases: 1}, "1/?"},
	} {
		if got := c.row.LeasesText(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
