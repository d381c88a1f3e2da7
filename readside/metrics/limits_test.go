package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet/fleettest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The proxies a guard rail holds back are counted by provider and reason, every reason of a
// provider that has proxies at 0 when none waits on it; the instances against the limit and
// the groups the brake holds are exported beside them.
func TestLimitWaitingMetrics(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	st, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, reason := range map[string]events.Reason{"a": events.ReasonLimitReached, "b": events.ReasonLimitReached,
		"c": events.ReasonRateLimited, "d": ""} {
		fleettest.Put(t, st.Proxies, name, []byte(`{"provider":"kvm"}`))
		fleettest.Put(t, st.Status, name, events.ProxyStatus{V: 1, Phase: events.PhasePending, Mode: "managed", Provider: "kvm",
			Reason: reason, CreatedAt: now, UpdatedAt: now})
	}
	fleettest.Put(t, st.Catalog, "kvm", events.CatalogRecord{V: 1, Provider: "kvm", Hosts: []events.CatalogHost{{Name: "h1"}},
		Limits: map[string]int{events.LimitMaxInstances: 5}})
	for name, suspect := range map[string]events.Suspect{"s1": {Scope: events.SuspectTarget, Name: "kvm/h1", Unhealthy: 3, Total: 4},
		"s2": {Scope: events.SuspectPool, Name: "web", Unhealthy: 3, Total: 3}} {
		fleettest.Put(t, st.Proxies, name, []byte(`{"provider":"kvm"}`))
		fleettest.Put(t, st.Status, name, events.ProxyStatus{V: 1, Phase: events.PhaseUnhealthy, Mode: "managed", Provider: "kvm", Host: "h1",
			InstanceID: "i-" + name, ProvisionAt: now.Add(-time.Hour), Suspect: suspect, CreatedAt: now, UpdatedAt: now})
	}
	m := metrics.New(st, nc, true)
	guards := `
# HELP egress_limit_instances Instances that may exist on a provider (a create was sent or one was reported), as the reconciler counts them against maxInstances.
# TYPE egress_limit_instances gauge
egress_limit_instances{provider="kvm"} 2
# HELP egress_limit_max_instances A provider's maxInstances, where it has one.
# TYPE egress_limit_max_instances gauge
egress_limit_max_instances{provider="kvm"} 5
# HELP egress_brake_suspect 1 for a provider target (name provider/target) or a pool the brake holds: so many of its proxies are Unhealthy at once that none is replaced for health.
# TYPE egress_brake_suspect gauge
egress_brake_suspect{name="kvm/h1",scope="target"} 1
egress_brake_suspect{name="web",scope="pool"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(guards), "egress_limit_instances", "egress_limit_max_instances", "egress_brake_suspect"); err != nil {
		t.Error(err)
	}
	want := `
# HELP egress_limit_waiting_proxies Proxies whose create a guard rail holds back, by provider and reason: LimitReached (maxInstances), RateLimited (maxCreatesPerMinute), ProviderUnhealthy (a failing target).
# TYPE egress_limit_waiting_proxies gauge
egress_limit_waiting_proxies{provider="kvm",reason="LimitReached"} 2
egress_limit_waiting_proxies{provider="kvm",reason="ProviderUnhealthy"} 0
egress_limit_waiting_proxies{provider="kvm",reason="RateLimited"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_limit_waiting_proxies"); err != nil {
		t.Error(err)
	}
}

// Addresses in quarantine are counted by pool; one whose quarantine ended is not.
func TestQuarantineMetric(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	st, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for addr, q := range map[string]struct {
		pool  string
		until time.Duration
	}{"127.0.97.2": {"web", time.Hour}, "127.0.97.3": {"web", time.Hour}, "127.0.98.2": {"api", time.Hour}, "127.0.99.2": {"api", -time.Minute}} {
		fleettest.Put(t, st.Quarantine, events.QuarantineKey(addr), events.Quarantine{V: 1, Address: addr, Prefix: addr + "/32", Pool: q.pool,
			Proxy: q.pool + "-x", Reason: events.ReasonBurned, At: now.Add(-time.Hour), Until: now.Add(q.until)})
	}
	m := metrics.New(st, nc, true)
	want := `
# HELP egress_quarantine_addresses Addresses in quarantine (address_quarantine), by the pool whose burned member left them: kept from new instances until their quarantine ends.
# TYPE egress_quarantine_addresses gauge
egress_quarantine_addresses{pool="api"} 1
egress_quarantine_addresses{pool="web"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_quarantine_addresses"); err != nil {
		t.Error(err)
	}
}
