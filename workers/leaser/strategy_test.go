package leaser_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
)

// round-robin over 5 proxies spreads 50 sequential leases 10 each, even when one proxy
// already carries leases (which the balanced order holds against it); balanced, from the same
// start, passes that proxy over.
func TestRoundRobinSpreadsSequentialLeasesEvenly(t *testing.T) {
	for _, tc := range []struct {
		strategy events.Strategy
		want     map[string]int
	}{
		{events.StrategyRoundRobin, map[string]int{"px-0": 10, "px-1": 10, "px-2": 10, "px-3": 10, "px-4": 10}},
		{events.StrategyBalanced, map[string]int{"px-1": 13, "px-2": 13, "px-3": 12, "px-4": 12}},
	} {
		t.Run(string(tc.strategy), func(t *testing.T) {
			r := newRig(t, nil)
			var ps []proxy
			for i := range 5 {
				ps = append(ps, proxy{name: fmt.Sprintf("px-%d", i), maxLeases: 10, attrs: map[string]string{"n": fmt.Sprint(i)}})
			}
			r.seed(ps...)
			r.startLeasers(1)
			// px-0 carries two leases throughout.
			for range 2 {
				r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"n": "0"}, TTLSeconds: 300, Holder: "other"})
			}
			got := map[string]int{}
			for range 50 {
				g := r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Holder: "rr", Strategy: tc.strategy})
				got[g.Proxy]++
				r.release(g.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%s: leases per proxy %v, want %v", tc.strategy, got, tc.want)
			}
		})
	}
}

// random reaches every proxy: 100 sequential leases over 5 proxies leave none out (the
// chance that a uniform choice does is 5·0.8¹⁰⁰, about 10⁻⁹), and none takes them all.
func TestRandomStrategyReachesEveryProxy(t *testing.T) {
	r := newRig(t, nil)
	var ps []proxy
	for i := range 5 {
		ps = append(ps, proxy{name: fmt.Sprintf("px-%d", i), maxLeases: 10})
	}
	r.seed(ps...)
	r.startLeasers(2)
	got := map[string]int{}
	for range 100 {
		g := r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Strategy: events.StrategyRandom})
		got[g.Proxy]++
		r.release(g.ID)
	}
	if len(got) != 5 {
		t.Fatalf("leases per proxy %v: not every proxy was chosen", got)
	}
}

// lowest-latency takes the fastest proxy until it is full, then the next fastest; a proxy
// whose latency is unknown comes last.
func TestLowestLatencyTakesTheFastestFirst(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-slow", maxLeases: 2, latencyMs: 80}, proxy{name: "px-fast", maxLeases: 2, latencyMs: 5},
		proxy{name: "px-mid", maxLeases: 2, latencyMs: 20}, proxy{name: "px-unknown", maxLeases: 2})
	r.startLeasers(1)
	var got []string
	for range 8 {
		got = append(got, r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Strategy: events.StrategyLowestLatency}).Proxy)
	}
	want := "[px-fast px-fast px-mid px-mid px-slow px-slow px-unknown px-unknown]"
	if fmt.Sprint(got) != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

// packed fills the proxy that carries the most leases first, up to its maxLeases, then the
// next (of equals, the last in the balanced order): 5 leases on three proxies of 3, one of
// which carries a lease already, fill that one and one more and leave the third idle, where
// balanced spreads them over all three.
func TestPackedFillsTheBusiestProxyFirst(t *testing.T) {
	for _, tc := range []struct {
		strategy events.Strategy
		want     map[string]int
	}{
		{events.StrategyPacked, map[string]int{"px-1": 2, "px-2": 3}},
		{events.StrategyBalanced, map[string]int{"px-0": 2, "px-1": 1, "px-2": 2}},
	} {
		t.Run(string(tc.strategy), func(t *testing.T) {
			r := newRig(t, nil)
			r.seed(proxy{name: "px-0", maxLeases: 3}, proxy{name: "px-1", maxLeases: 3, attrs: map[string]string{"busy": "yes"}},
				proxy{name: "px-2", maxLeases: 3})
			r.startLeasers(1)
			r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"busy": "yes"}, TTLSeconds: 300, Holder: "other"})
			got := map[string]int{}
			for range 5 {
				got[r.mustAcquire(events.AcquireRequest{TTLSeconds: 300, Holder: "p", Strategy: tc.strategy}).Proxy]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%s: leases per proxy %v, want %v", tc.strategy, got, tc.want)
			}
		})
	}
}

// An acquire that names an autoscaled pool and no strategy packs, so that the pool's surplus
// falls idle and can scale down; a pool of fixed size keeps the balanced default, and a
// strategy the acquire names is kept.
func TestAnAutoscaledPoolPacksByDefault(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for name, doc := range map[string]string{
		"web":   `{"template":{"provider":"local"},"autoscale":{"min":0,"max":3}}`,
		"fixed": `{"template":{"provider":"local"},"replicas":3}`,
	} {
		if _, err := r.store.Pools.Put(ctx, name, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	var members []proxy
	for _, pool := range []string{"web", "fixed"} {
		for i := range 3 {
			members = append(members, proxy{name: fmt.Sprintf("%s-%d", pool, i), pool: pool, attrs: map[string]string{"pool": pool}, maxLeases: 3})
		}
	}
	r.seed(members...)
	r.startLeasers(1)
	spread := func(pool string, strategy events.Strategy, n int) map[string]int {
		got := map[string]int{}
		for range n {
			got[r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"pool": pool}, TTLSeconds: 300, Strategy: strategy}).Proxy]++
		}
		return got
	}
	if got := spread("web", "", 3); len(got) != 1 {
		t.Errorf("three acquires of the autoscaled pool, no strategy: %v, want all on one member", got)
	}
	if got := spread("fixed", "", 3); len(got) != 3 {
		t.Errorf("three acquires of the pool of fixed size, no strategy: %v, want one on each member", got)
	}
	if got := spread("web", events.StrategyBalanced, 2); len(got) != 2 {
		t.Errorf("two balanced acquires of the autoscaled pool: %v, want two members", got)
	}
}
