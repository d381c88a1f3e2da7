package selection

import (
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// A fleet of anonymous proxies with one elite proxy that ranks last: an acquire with
// minAnonymity elite reads the one entry of the set's elite order, not the thousands it would
// pass over filtering the eligible order, and a verdict that changes moves a proxy between
// the orders.
func TestMinAnonymityReadsOnlyWhatMeetsIt(t *testing.T) {
	v := NewFleet(0)
	rev := uint64(0)
	health := func(name string, h events.ProxyHealth) { v.SetHealth(name, h) }
	const n = 5000
	for i := range n {
		name := fmt.Sprintf("px-%05d", i)
		a, latency := events.AnonymityAnonymous, 1.0
		if i == n-1 {
			a, latency = events.AnonymityElite, 999 // the slowest: last in the eligible order
		}
		rev++
		v.SetSpec(name, rev, false, &schemas.ProxySpec{Provider: "local", MaxLeases: new(1)})
		rev++
		v.SetStatus(name, rev, events.ProxyStatus{V: 1, Phase: events.PhaseReady, IP: "127.0.0.1", Port: 3128}, true)
		health(name, events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: latency, Anonymity: a})
	}
	elite := NewQuery(events.AcquireRequest{MinAnonymity: events.AnonymityElite})
	var cur Cursor
	got := v.Next(elite, &cur, map[string]bool{}, batchSize)
	if len(got) != 1 || got[0].Name != fmt.Sprintf("px-%05d", n-1) {
		t.Fatalf("minAnonymity elite: %d candidates %v", len(got), got)
	}
	v.withSet(nil, "", orderBalanced, func(s *selSet) {
		if s.orders[orderBalanced][0].root == nil || countNodes(s.orders[orderBalanced][2].root) != 1 || countNodes(s.orders[orderBalanced][1].root) != n {
			t.Errorf("orders: elite %d, anonymous %d", countNodes(s.orders[orderBalanced][2].root), countNodes(s.orders[orderBalanced][1].root))
		}
		if b := s.belowAnonymity(events.AnonymityElite); b != n-1 {
			t.Errorf("below elite: %d, want %d", b, n-1)
		}
	})
	// px-00000 turns elite, and the elite proxy turns transparent.
	health("px-00000", events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: 1, Anonymity: events.AnonymityElite})
	health(fmt.Sprintf("px-%05d", n-1), events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: 999, Anonymity: events.AnonymityTransparent})
	cur = Cursor{}
	got = v.Next(elite, &cur, map[string]bool{}, batchSize)
	if len(got) != 1 || got[0].Name != "px-00000" {
		t.Fatalf("after the verdicts changed: %v", got)
	}
	av := v.Availability(NewQuery(events.AcquireRequest{MinAnonymity: events.AnonymityAnonymous}), NewLearned())
	if av.Ready != n || av.BelowAnonymity != 1 {
		t.Errorf("availability for anonymous: %+v", av)
	}
}

func countNodes(n *rankNode) int {
	if n == nil {
		return 0
	}
	return 1 + countNodes(n.left) + countNodes(n.right)
}
