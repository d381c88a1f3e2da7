package fleet

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// TestGuards: instances are counted as the reconciler counts them (an instance reported or a
// create sent), per provider and target, against the catalog's limits; creates of the last
// minute, the proxies held back, and the brake are shown per provider and target.
func TestGuards(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	row := func(name string, st events.ProxyStatus) Row { st.Mode = "managed"; return Row{Name: name, Status: &st} }
	rows := []Row{
		row("a", events.ProxyStatus{Provider: "kvm", Host: "h1", InstanceID: "i-a", ProvisionAt: now.Add(-time.Hour)}),
		row("b", events.ProxyStatus{Provider: "kvm", Host: "h1", ProvisionAt: now.Add(-10 * time.Second)}), // create sent
		row("c", events.ProxyStatus{Provider: "kvm", Host: "h2", InstanceID: "i-c", ProvisionAt: now.Add(-30 * time.Second),
			Phase: events.PhaseUnhealthy, Suspect: events.Suspect{Scope: events.SuspectTarget, Name: "kvm/h2", Unhealthy: 3, Total: 4}}),
		row("d", events.ProxyStatus{Provider: "kvm", Reason: events.ReasonLimitReached}),
		row("e", events.ProxyStatus{Provider: "kvm", Reason: events.ReasonRateLimited}),
		{Name: "x", Status: &events.ProxyStatus{Mode: "external", Provider: "", InstanceID: ""}},
		{Name: "pending"}, // no status yet: counts nowhere
	}
	catalogs := []events.CatalogRecord{{Provider: "kvm", Hosts: []events.CatalogHost{{Name: "h1"}, {Name: "h2"}, {Name: "h3"}},
		Limits: map[string]int{events.LimitMaxInstances: 3, events.LimitMaxPerTarget: 2, events.LimitCreatesPerMinute: 6}},
		{Provider: "idle"}}
	checks := []events.TargetHealth{{Provider: "kvm", Target: "h3", Ready: false, Reason: "Unreachable"}}
	got := Guards(rows, catalogs, checks, now)
	if len(got) != 2 || got[0].Provider != "idle" || got[1].Provider != "kvm" {
		t.Fatalf("providers %+v", got)
	}
	g := got[1]
	if g.Instances != 3 || g.MaxInstances != 3 || g.CreatesLastMinute != 2 || g.MaxCreatesPerMinute != 6 {
		t.Errorf("kvm: %+v", g)
	}
	if g.Waiting[events.ReasonLimitReached] != 1 || g.Waiting[events.ReasonRateLimited] != 1 {
		t.Errorf("waiting %v", g.Waiting)
	}
	if len(g.Targets) != 3 {
		t.Fatalf("targets %+v", g.Targets)
	}
	h3, h1, h2 := g.Targets[0], g.Targets[1], g.Targets[2] // checked targets first, in config order
	if h1.Instances != 2 || h1.MaxInstances != 2 || h1.Suspect != nil {
		t.Errorf("h1 %+v", h1)
	}
	if h2.Instances != 1 || h2.Suspect == nil || h2.Suspect.Unhealthy != 3 {
		t.Errorf("h2 %+v", h2)
	}
	if h3.Instances != 0 || h3.Check == nil || h3.Check.Reason != "Unreachable" {
		t.Errorf("h3 %+v", h3)
	}
	if pools := SuspectPools(rows); len(pools) != 0 {
		t.Errorf("no pool is suspect: %v", pools)
	}
}

// TestPoolRowSuspect: the pools view says a pool is held by the brake, from its members'
// statuses, and says nothing of a pool whose Unhealthy members are judged one by one.
func TestPoolRowSuspect(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	held := events.Suspect{Scope: events.SuspectPool, Name: "crawl", Unhealthy: 3, Total: 4}
	rows := []Row{
		{Name: "crawl-a", Pool: "crawl", Status: &events.ProxyStatus{Phase: events.PhaseUnhealthy, Suspect: held}},
		{Name: "crawl-b", Pool: "crawl", Status: &events.ProxyStatus{Phase: events.PhaseReady}},
		{Name: "web-a", Pool: "web", Status: &events.ProxyStatus{Phase: events.PhaseUnhealthy}},
	}
	in := decoded{pools: map[string]poolFields{"crawl": {valid: true, replicas: 4}, "web": {valid: true, replicas: 1}}}
	got := buildPools(now, in, rows)
	if len(got) != 2 || got[0].Suspect == nil || *got[0].Suspect != held || got[1].Suspect != nil {
		t.Fatalf("pools %+v", got)
	}
}
