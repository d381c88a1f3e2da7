package leaser_test

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
)

// testClock is a settable Config.Now: a quiet period passes by moving it, not by waiting.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// A target blocked on tier 1 moves to tier 2 and comes back after the quiet period; a target
// never blocked stays on tier 1. Two replicas share the tier (each acquire and report may
// reach either), and time is the leasers' clock, moved by the test.
func TestTiers(t *testing.T) {
	clk := &testClock{t: time.Now()}
	r := newRig(t, func(c *leaser.Config) {
		c.Now = clk.Now
		c.Tiers = leaser.Tiers{Blocks: 2, Quiet: 10 * time.Minute}
	})
	dc, resi := map[string]string{"pool": "dc"}, map[string]string{"pool": "resi"}
	// Five on tier 1: each block cools one for the target (a real second, on the server's
	// clock), and four blocks leave one free whenever the test reaches tier 1.
	ps := []proxy{{name: "resi-1", attrs: resi, maxLeases: 5}}
	for _, n := range []string{"dc-1", "dc-2", "dc-3", "dc-4", "dc-5"} {
		ps = append(ps, proxy{name: n, attrs: dc, maxLeases: 5})
	}
	r.seed(ps...)
	r.startLeasers(2)
	tiers := []map[string]string{dc, resi}
	acquire := func(target string, wantTier int, want events.TierReason) events.LeaseGrant {
		t.Helper()
		g := r.mustAcquire(events.AcquireRequest{Target: target, Tiers: tiers, Holder: "crawler", TTLSeconds: 60})
		if g.Tier == nil || g.Tier.Tier != wantTier || g.Tier.Of != 2 || g.Tier.Reason != want || !maps.Equal(g.Tier.Selector, tiers[wantTier-1]) {
			t.Fatalf("%s: granted %s on %+v, want tier %d (%s)", target, g.Proxy, g.Tier, wantTier, want)
		}
		if g.Egress == nil || g.Egress.Attributes["pool"] != tiers[wantTier-1]["pool"] {
			t.Fatalf("%s: tier %d granted %s, not of its selector", target, wantTier, g.Proxy)
		}
		return g
	}
	block := func(g events.LeaseGrant, target string, wantTier int, wantMoved bool) {
		t.Helper()
		rr := r.report(events.ReportRequest{ID: g.ID, Result: events.ReportBlocked, Target: target, CooldownSeconds: 1, Release: true})
		if rr.Tier != wantTier || rr.TierMoved != wantMoved {
			t.Fatalf("block on %s: tier %d moved %v, want %d %v", g.Proxy, rr.Tier, rr.TierMoved, wantTier, wantMoved)
		}
	}
	cycle := func(target string, wantTier int, want events.TierReason) {
		t.Helper()
		r.release(acquire(target, wantTier, want).ID)
	}

	for range 3 {
		cycle("calm.example", 1, events.TierCheapest)
	}
	// Two blocks on tier 1 (Blocks: 2) move shy.example up.
	block(acquire("shy.example", 1, events.TierCheapest), "shy.example", 1, false)
	block(acquire("shy.example", 1, events.TierCheapest), "shy.example", 2, true)
	cycle("shy.example", 2, events.TierBlocked)
	clk.advance(9 * time.Minute) // not quiet long enough yet
	cycle("shy.example", 2, events.TierBlocked)
	cycle("calm.example", 1, events.TierCheapest)

	// Quiet for the period: the next acquire probes tier 1, and the target stays there.
	clk.advance(2 * time.Minute)
	cycle("shy.example", 1, events.TierProbe)
	cycle("shy.example", 1, events.TierProbe)
	// On probation one block moves it back up at once...
	block(acquire("shy.example", 1, events.TierProbe), "shy.example", 2, true)
	cycle("shy.example", 2, events.TierBlocked)
	// ... and after the next quiet period, one quiet period more on tier 1 makes it an
	// ordinary tier 1 again, where one block does not move it.
	clk.advance(11 * time.Minute)
	cycle("shy.example", 1, events.TierProbe)
	clk.advance(11 * time.Minute)
	block(acquire("shy.example", 1, events.TierProbe), "shy.example", 1, false)
	cycle("calm.example", 1, events.TierCheapest)

	// A tier with nothing matching falls back to the next, without moving the target.
	none := []map[string]string{{"pool": "none"}, resi}
	g := r.mustAcquire(events.AcquireRequest{Target: "calm.example", Tiers: none, Holder: "crawler", TTLSeconds: 60})
	if g.Tier == nil || g.Tier.Tier != 2 || g.Tier.Reason != events.TierFallback {
		t.Fatalf("fallback: %+v", g.Tier)
	}
	rr := r.report(events.ReportRequest{ID: g.ID, Result: events.ReportBlocked, Target: "calm.example", CooldownSeconds: 1, Release: true})
	if rr.Tier != 1 || rr.TierMoved {
		t.Fatalf("a block on a fallback tier: tier %d moved %v, want 1 and no move", rr.Tier, rr.TierMoved)
	}
	// Every tier refusing: the 503 of the target's tier.
	_, rep := r.acquire(events.AcquireRequest{Target: "calm.example", Tiers: []map[string]string{{"pool": "none"}, {"pool": "gone"}}})
	if rep.code != events.CodeUnavailable || rep.err.Availability == nil || rep.err.Availability.Matched != 0 {
		t.Fatalf("nothing in any tier: %d %+v", rep.code, rep.err)
	}
}
