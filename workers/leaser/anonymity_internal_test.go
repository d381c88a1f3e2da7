package leaser

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// A fleet of anonymous proxies with one elite proxy that ranks last: an acquire with
// minAnonymity elite reads the one entry of the set's elite order, not the thousands it would
// pass over filtering the eligible order, and a verdict that changes moves a proxy between
// the orders.
func TestMinAnonymityReadsOnlyWhatMeetsIt(t *testing.T) {
	v := newView()
	rev := uint64(0)
	put := func(apply func(jetstream.KeyValueEntry), key string, val any) {
		rev++
		b, _ := json.Marshal(val)
		apply(entry{key: key, value: b, op: jetstream.KeyValuePut, rev: rev})
	}
	const n = 5000
	for i := range n {
		name := fmt.Sprintf("px-%05d", i)
		a, latency := events.AnonymityAnonymous, 1.0
		if i == n-1 {
			a, latency = events.AnonymityElite, 999 // the slowest: last in the eligible order
		}
		put(v.applySpec, name, map[string]any{"provider": "local", "maxLeases": 1})
		put(v.applyStatus, name, events.ProxyStatus{V: 1, Phase: events.PhaseReady, IP: "127.0.0.1", Port: 3128})
		put(v.applyHealth, name, events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: latency, Anonymity: a})
	}
	elite := newQuery(events.AcquireRequest{MinAnonymity: events.AnonymityElite})
	var cur cursor
	got := v.next(elite, &cur, map[string]bool{}, candidateBatch)
	if len(got) != 1 || got[0].name != fmt.Sprintf("px-%05d", n-1) {
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
	put(v.applyHealth, "px-00000", events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: 1, Anonymity: events.AnonymityElite})
	put(v.applyHealth, fmt.Sprintf("px-%05d", n-1), events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: 999, Anonymity: events.AnonymityTransparent})
	cur = cursor{}
	got = v.next(elite, &cur, map[string]bool{}, candidateBatch)
	if len(got) != 1 || got[0].name != "px-00000" {
		t.Fatalf("after the verdicts changed: %v", got)
	}
	av := v.availability(newQuery(events.AcquireRequest{MinAnonymity: events.AnonymityAnonymous}), newAttempt())
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
