package metrics_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The demand gauges sum the leasers' records per scope: held is the largest (every leaser
// sees every lease), the rest add up; a selector without a pool is labelled with its pairs.
// An autoscaled pool also exports its bounds and what demand asks for.
func TestDemandMetrics(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	sel := map[string]string{"geo": "de", "tier": "a"}
	for _, d := range []events.PoolDemand{
		{V: 1, Leaser: "l1", Pool: "web", WindowSeconds: 30, Held: 4, Waiting: 2, Refused: 1, Granted: 30, GrantsPerSecond: 1, At: now},
		{V: 1, Leaser: "l2", Pool: "web", WindowSeconds: 30, Held: 3, Waiting: 1, Refused: 2, Granted: 15, GrantsPerSecond: 0.5, At: now},
		{V: 1, Leaser: "l1", Selector: sel, WindowSeconds: 30, Refused: 5, At: now},
	} {
		scope := d.Pool
		if scope == "" {
			scope = events.SelectorScope(d.Selector)
		}
		b, _ := json.Marshal(d)
		if _, err := kvstore.PutTTL(ctx, js, st.PoolDemand, events.DemandKey(scope, d.Leaser), b, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Pools.Put(ctx, "web", []byte(`{"template":{"provider":"local"},"autoscale":{"min":0,"max":4}}`)); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(st, nc, true)
	want := `
# HELP egress_pool_autoscale_limit A pool's autoscale bounds, by bound (min or max).
# TYPE egress_pool_autoscale_limit gauge
egress_pool_autoscale_limit{bound="max",pool="web"} 4
egress_pool_autoscale_limit{bound="min",pool="web"} 0
# HELP egress_pool_demand_grants_per_second Leases granted per second over the leasers' window, summed over the leasers.
# TYPE egress_pool_demand_grants_per_second gauge
egress_pool_demand_grants_per_second{pool="",selector="geo=de,tier=a"} 0
egress_pool_demand_grants_per_second{pool="web",selector=""} 1.5
# HELP egress_pool_demand_held Lease slots held on a pool's members (or a selector's proxies), as the leasers see them.
# TYPE egress_pool_demand_held gauge
egress_pool_demand_held{pool="",selector="geo=de,tier=a"} 0
egress_pool_demand_held{pool="web",selector=""} 4
# HELP egress_pool_demand_leasers Leaser replicas whose demand records are live for the scope.
# TYPE egress_pool_demand_leasers gauge
egress_pool_demand_leasers{pool="",selector="geo=de,tier=a"} 1
egress_pool_demand_leasers{pool="web",selector=""} 2
# HELP egress_pool_demand_refused Acquires refused for want of a free proxy within the leasers' window (a holder once however often it retried), summed over the leasers.
# TYPE egress_pool_demand_refused gauge
egress_pool_demand_refused{pool="",selector="geo=de,tier=a"} 5
egress_pool_demand_refused{pool="web",selector=""} 3
# HELP egress_pool_demand_waiting Acquires waiting for a free proxy now, summed over the leasers.
# TYPE egress_pool_demand_waiting gauge
egress_pool_demand_waiting{pool="",selector="geo=de,tier=a"} 0
egress_pool_demand_waiting{pool="web",selector=""} 3
`
	names := []string{"egress_pool_autoscale_limit", "egress_pool_demand_grants_per_second", "egress_pool_demand_held",
		"egress_pool_demand_leasers", "egress_pool_demand_refused", "egress_pool_demand_waiting"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
