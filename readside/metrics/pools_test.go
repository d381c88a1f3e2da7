package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet/fleettest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The pool gauges are the read model's pools (fleettest.Pools), as `egressd status pools`
// shows them; a pool whose spec does not parse has no desired gauge.
func TestPoolMetrics(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	st, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Pools(t, st, time.Now())
	m := metrics.New(st, nc, true)
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP egress_pool_desired Members a pool's spec asks for (replicas), from pools.
# TYPE egress_pool_desired gauge
egress_pool_desired{pool="crawl"} 3
egress_pool_desired{pool="web"} 2
# HELP egress_pool_draining A pool's members that are draining: no new leases, held ones run on.
# TYPE egress_pool_draining gauge
egress_pool_draining{pool="broken"} 0
egress_pool_draining{pool="crawl"} 1
egress_pool_draining{pool="old"} 0
egress_pool_draining{pool="web"} 0
# HELP egress_pool_info 1 for every pool, labelled with its phase.
# TYPE egress_pool_info gauge
egress_pool_info{phase="Deleting",pool="old"} 1
egress_pool_info{phase="Invalid",pool="broken"} 1
egress_pool_info{phase="Pending",pool="web"} 1
egress_pool_info{phase="Progressing",pool="crawl"} 1
# HELP egress_pool_leased Lease slots held on a pool's members.
# TYPE egress_pool_leased gauge
egress_pool_leased{pool="broken"} 0
egress_pool_leased{pool="crawl"} 3
egress_pool_leased{pool="old"} 0
egress_pool_leased{pool="web"} 0
# HELP egress_pool_members Proxies a pool owns now, draining ones included.
# TYPE egress_pool_members gauge
egress_pool_members{pool="broken"} 0
egress_pool_members{pool="crawl"} 4
egress_pool_members{pool="old"} 1
egress_pool_members{pool="web"} 0
# HELP egress_pool_ready A pool's members in phase Ready and not draining.
# TYPE egress_pool_ready gauge
egress_pool_ready{pool="broken"} 0
egress_pool_ready{pool="crawl"} 3
egress_pool_ready{pool="old"} 0
egress_pool_ready{pool="web"} 0
`
	names := []string{"egress_pool_desired", "egress_pool_draining", "egress_pool_info", "egress_pool_leased", "egress_pool_members", "egress_pool_ready"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// A pool bucket that cannot be read leaves the pool gauges out, not at wrong values, and
// says so in egress_scrape_errors.
func TestPoolMetricsLeftOutWhenUnread(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Pools(t, st, time.Now())
	if err := js.DeleteKeyValue(ctx, "pool_status"); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(st, nc, true)
	n, err := testutil.GatherAndCount(m.Registry, "egress_pool_info", "egress_pool_desired", "egress_pool_members")
	if err != nil || n != 0 {
		t.Errorf("%d pool samples (%v), want none", n, err)
	}
	want := `
# HELP egress_scrape_errors Sources that could not be read during this scrape.
# TYPE egress_scrape_errors gauge
egress_scrape_errors{source="pool_status"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_scrape_errors"); err != nil {
		t.Error(err)
	}
}
