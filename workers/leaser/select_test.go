package leaser_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func proxiesOf(gs ...events.LeaseGrant) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Proxy)
	}
	return out
}

// The selector matches attributes exactly; a proxy that is not Ready or has maxLeases 0 is
// never leased, and the 503 says why.
func TestLeaseEligibility(t *testing.T) {
	r := newRig(t, nil)
	r.seed(
		proxy{name: "de-1", maxLeases: 2, attrs: map[string]string{"geo": "de", "tier": "a"}},
		proxy{name: "de-2", maxLeases: 0, attrs: map[string]string{"geo": "de", "tier": "a"}},
		proxy{name: "de-3", maxLeases: 5, attrs: map[string]string{"geo": "de", "tier": "a"}, phase: events.PhaseUnhealthy},
		proxy{name: "de-4", maxLeases: 5, attrs: map[string]string{"geo": "de", "tier": "a"}, phase: events.PhaseProvisioning},
		proxy{name: "us-1", maxLeases: 5, attrs: map[string]string{"geo": "us"}},
	)
	r.startLeasers(2)

	sel := map[string]string{"geo": "de", "tier": "a"}
	for range 2 {
		if g := r.mustAcquire(events.AcquireRequest{Selector: sel}); g.Proxy != "de-1" {
			t.Fatalf("leased %s for %v", g.Proxy, sel)
		}
	}
	_, rep := r.acquire(events.AcquireRequest{Selector: sel})
	want := events.Availability{Matched: 4, Ready: 2, AtCapacity: 2}
	if rep.code != events.CodeUnavailable || *rep.err.Availability != want {
		t.Fatalf("%d %+v, want 503 %+v", rep.code, rep.err.Availability, want)
	}
	for _, s := range []map[string]string{{"geo": "DE"}, {"geo": "de", "tier": "b"}, {"geo": "de", "zone": "x"}} {
		_, rep := r.acquire(events.AcquireRequest{Selector: s})
		if rep.code != events.CodeUnavailable || rep.err.Availability.Matched != 0 {
			t.Fatalf("selector %v: %d %+v, want 503 with nothing matched", s, rep.code, rep.err.Availability)
		}
	}
	if g := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"geo": "us"}}); g.Proxy != "us-1" {
		t.Fatalf("leased %s", g.Proxy)
	}
	if g := r.mustAcquire(events.AcquireRequest{}); g.Proxy != "us-1" {
		t.Fatalf("empty selector leased %s", g.Proxy)
	}

	// Once Ready, a proxy is leasable without a restart (the view follows proxy_status).
	r.seed(proxy{name: "de-3", maxLeases: 5, attrs: map[string]string{"geo": "de", "tier": "a"}})
	eventually(t, 5*time.Second, "de-3 leasable once Ready", func() bool {
		g, rep := r.acquire(events.AcquireRequest{Selector: sel})
		return rep.code == 0 && g.Proxy == "de-3"
	})
}

// Order: the sticky key's previous proxy, then fewest active leases, least recently leased,
// lowest probe latency, name.
func TestLeaseSelectionOrder(t *testing.T) {
	r := newRig(t, nil)
	r.seed(
		proxy{name: "a", maxLeases: 3, latencyMs: 50},
		proxy{name: "b", maxLeases: 3, latencyMs: 10},
		proxy{name: "c", maxLeases: 3},                // latency unknown: last among equals
		proxy{name: "d", maxLeases: 3, latencyMs: 50}, // as a, so the name decides
	)
	r.startLeasers(1) // one replica: its view is the whole truth, so the order is exact

	var gs []events.LeaseGrant
	for range 8 {
		gs = append(gs, r.mustAcquire(events.AcquireRequest{}))
	}
	// Round 1 (no leases, never leased): latency, then name, unknown latency last.
	// Round 2 (one lease each): least recently leased first, the same order again.
	want := []string{"b", "a", "d", "c", "b", "a", "d", "c"}
	if got := proxiesOf(gs...); !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Releasing makes a the one with fewest leases.
	r.release(gs[1].ID)
	if g := r.mustAcquire(events.AcquireRequest{}); g.Proxy != "a" {
		t.Fatalf("after a release: leased %s, want a (fewest leases)", g.Proxy)
	}
}

func TestLeaseStickyPrefersThePreviousProxy(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "p", maxLeases: 3}, proxy{name: "q", maxLeases: 3})
	r.startLeasers(1)

	sticky := events.AcquireRequest{Sticky: "session-42"}
	steps := []struct {
		req  events.AcquireRequest
		want string
		why  string
	}{
		{sticky, "p", "a new sticky key takes the best proxy (by name here)"},
		{events.AcquireRequest{}, "q", "fewest leases"},
		{events.AcquireRequest{}, "p", "equal leases: least recently leased"},
		{sticky, "p", "sticky beats fewest leases (p 2, q 1)"},
		{sticky, "q", "the sticky proxy is full: the next best"},
	}
	var gs []events.LeaseGrant
	for i, s := range steps {
		g := r.mustAcquire(s.req)
		if g.Proxy != s.want {
			t.Fatalf("step %d: leased %s, want %s (%s)", i, g.Proxy, s.want, s.why)
		}
		gs = append(gs, g)
	}
	// p 2, q 2, p leased less recently; the sticky key now points at q, its latest proxy.
	r.release(gs[3].ID)
	if g := r.mustAcquire(sticky); g.Proxy != "q" {
		t.Fatalf("leased %s, want q: the sticky key's latest proxy", g.Proxy)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A spec with "drain": true is never granted again, even while its status still says Ready
// (the reconciler's Draining follows the spec), and the leases it holds renew and release
// as before: a pool drains a member by its leases, never by cutting them.
func TestDrainStopsGrantsButNotHeldLeases(t *testing.T) {
	r := newRig(t, nil)
	sel := map[string]string{"pool": "web"}
	r.seed(proxy{name: "web-a", maxLeases: 3, attrs: sel})
	r.startLeasers(2)
	held := r.mustAcquire(events.AcquireRequest{Selector: sel, TTLSeconds: 30})
	r.seed(proxy{name: "web-a", maxLeases: 3, attrs: sel, drain: true})
	eventually(t, 5*time.Second, "no grant on a draining spec", func() bool {
		_, rep := r.acquire(events.AcquireRequest{Selector: sel})
		return rep.code == events.CodeUnavailable && rep.err.Availability.Ready == 0
	})
	for range 3 {
		rep := r.call(events.LeaseRenewSubject, events.RenewRequest{ID: held.ID, TTLSeconds: 30})
		if rep.code != 0 {
			t.Fatalf("renew of a lease on a draining proxy: %d %s", rep.code, rep.err.Message)
		}
	}
	if !r.release(held.ID) {
		t.Fatal("release of a lease on a draining proxy")
	}
	r.seed(proxy{name: "web-a", maxLeases: 3, attrs: sel})
	eventually(t, 5*time.Second, "leasable again once the drain is lifted", func() bool {
		_, rep := r.acquire(events.AcquireRequest{Selector: sel})
		return rep.code == 0
	})
}

// minAnonymity takes only proxies the probers judged at least that anonymous on their current
// address; unknown is below every minimum. The one elite proxy of a fleet of anonymous ones
// is found though it ranks last, and the 503 counts what the minimum excluded.
func TestLeaseMinAnonymity(t *testing.T) {
	r := newRig(t, nil)
	r.seed(
		proxy{name: "anon-1", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityAnonymous},
		proxy{name: "anon-2", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityAnonymous},
		proxy{name: "anon-3", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityAnonymous},
		proxy{name: "anon-4", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityAnonymous},
		proxy{name: "anon-5", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityAnonymous},
		proxy{name: "clear", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityTransparent},
		proxy{name: "unjudged", maxLeases: 2, latencyMs: 1},
		proxy{name: "z-elite", maxLeases: 1, latencyMs: 900, anonymity: events.AnonymityElite},
		proxy{name: "z-sick-elite", maxLeases: 1, anonymity: events.AnonymityElite, phase: events.PhaseUnhealthy},
	)
	r.startLeasers(2)
	elite := events.AcquireRequest{MinAnonymity: events.AnonymityElite}
	var g events.LeaseGrant
	eventually(t, 5*time.Second, "the elite proxy leased for minAnonymity elite", func() bool {
		var rep reply
		g, rep = r.acquire(elite)
		return rep.code == 0
	})
	if g.Proxy != "z-elite" {
		t.Fatalf("minAnonymity elite leased %s", g.Proxy)
	}
	_, rep := r.acquire(elite)
	want := events.Availability{Matched: 9, Ready: 8, AtCapacity: 1, BelowAnonymity: 7}
	if rep.code != events.CodeUnavailable || *rep.err.Availability != want {
		t.Fatalf("%d %+v, want 503 %+v", rep.code, rep.err.Availability, want)
	}
	if !strings.Contains(rep.err.Message, "7 less anonymous than elite") {
		t.Errorf("message %q does not count what minAnonymity excluded", rep.err.Message)
	}
	// anonymous takes the anonymous ones and the elite one (full now), never clear or unjudged.
	seen := map[string]bool{}
	for range 10 {
		seen[r.mustAcquire(events.AcquireRequest{MinAnonymity: events.AnonymityAnonymous}).Proxy] = true
	}
	if seen["clear"] || seen["unjudged"] || len(seen) != 5 {
		t.Fatalf("minAnonymity anonymous leased %v", seen)
	}
	_, rep = r.acquire(events.AcquireRequest{MinAnonymity: events.AnonymityAnonymous})
	want = events.Availability{Matched: 9, Ready: 8, AtCapacity: 6, BelowAnonymity: 2}
	if rep.code != events.CodeUnavailable || *rep.err.Availability != want {
		t.Fatalf("%d %+v, want 503 %+v", rep.code, rep.err.Availability, want)
	}
	// Without a minimum anything goes, and nothing counts as below.
	g, rep = r.acquire(events.AcquireRequest{})
	if rep.code != 0 || (g.Proxy != "clear" && g.Proxy != "unjudged") {
		t.Fatalf("no minimum: %d %s", rep.code, g.Proxy)
	}
	// A verdict that improves makes a proxy leasable for the minimum without a restart.
	r.seed(proxy{name: "clear", maxLeases: 2, latencyMs: 1, anonymity: events.AnonymityElite})
	eventually(t, 5*time.Second, "clear leasable once judged elite", func() bool {
		g, rep := r.acquire(elite)
		return rep.code == 0 && g.Proxy == "clear"
	})
}
