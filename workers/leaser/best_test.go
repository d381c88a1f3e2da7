package leaser_test

import (
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
)

// With proxies whose recorded success on a target differs, best-for-target grants go to the
// better ones (a share 1−explore to the best free one) and still explore (a share explore to
// a proxy without history there). The history is made the way crawlers make it: grants and
// reports through the service. The rolls are random, so the bounds are wide enough that a
// run outside them has a chance below 1e-8 (200 acquires exploring with p = 0.1: mean 20,
// standard deviation 4.2).
func TestBestForTargetPrefersWhatWorked(t *testing.T) {
	explore := 0.1
	r := newRig(t, func(c *leaser.Config) { c.BestForTarget = leaser.BestForTarget{Explore: &explore} })
	ps := []proxy{{name: "good", maxLeases: 1, attrs: map[string]string{"id": "good"}},
		{name: "poor", maxLeases: 1, attrs: map[string]string{"id": "poor"}}}
	for i := range 40 {
		ps = append(ps, proxy{name: "new-" + string(rune('a'+i/26)) + string(rune('a'+i%26)), maxLeases: 1, attrs: map[string]string{"id": "new"}})
	}
	r.seed(ps...)
	r.startLeasers(1) // what a proxy did is known to the replica that saw it (docs/leases.md)

	const target = "shop.example"
	history := func(id string, result events.ReportResult, n int) {
		g := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"id": id}, Target: target, Holder: "setup"})
		for range n {
			req := events.ReportRequest{ID: g.ID, Result: result, Target: target}
			if result == events.ReportBlocked {
				req.CooldownSeconds = 1
			}
			r.report(req)
		}
		r.release(g.ID)
	}
	history("good", events.ReportOK, 20)
	history("poor", events.ReportOK, 2)
	history("poor", events.ReportBlocked, 10) // and cooling for the target a second

	const n = 200
	got := map[string]int{}
	for range n {
		g := r.mustAcquire(events.AcquireRequest{Target: target, Strategy: events.StrategyBestForTarget, Holder: "crawler"})
		got[g.Proxy]++
		r.release(g.ID)
	}
	explored := n - got["good"] - got["poor"]
	if got["poor"] != 0 || explored < 2 || explored > 50 || got["good"] < n-50 {
		t.Fatalf("grants %v (%d explored): want most on good, a tenth or so on new proxies, none on poor", got, explored)
	}
	for name, k := range got {
		if name != "good" && k > 1 {
			t.Fatalf("%s granted %d times: once explored, a new proxy has history and ranks below good", name, k)
		}
	}
}
