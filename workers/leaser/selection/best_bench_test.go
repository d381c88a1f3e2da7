package selection

import (
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// BenchmarkNextBestForTarget is the first batch of an acquire's candidates among 10,000 Ready
// proxies with the balanced order and with best-for-target, where 0, 100 or all 10,000 of the
// proxies have history on the target: best-for-target scores and sorts the proxies with
// history once per acquire (docs/performance.md#best-for-target-and-tiers).
func BenchmarkNextBestForTarget(b *testing.B) {
	t0 := time.Unix(1_000_000, 0)
	fleet := func(withHistory int) *Fleet {
		f := NewFleet(0)
		one := 4
		for i := range 10000 {
			name := fmt.Sprintf("px-%05d", i)
			f.SetSpec(name, 1, false, &schemas.ProxySpec{Provider: "local", MaxLeases: &one})
			f.SetStatus(name, 1, events.ProxyStatus{Phase: events.PhaseReady, IP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Port: 3128}, true)
			if i < withHistory {
				f.Outcome(name, "t", 1+i%7, i%5, i%3, t0)
			}
		}
		return f
	}
	for _, bc := range []struct {
		name     string
		strategy events.Strategy
		history  int
	}{
		{"balanced", events.StrategyBalanced, 10000},
		{"best-for-target/history-0", events.StrategyBestForTarget, 0},
		{"best-for-target/history-100", events.StrategyBestForTarget, 100},
		{"best-for-target/history-10000", events.StrategyBestForTarget, 10000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := fleet(bc.history)
			q := NewQuery(events.AcquireRequest{Target: "t", Strategy: bc.strategy})
			q.Roll, q.Now = 0.5, t0
			for b.Loop() {
				var cur Cursor
				if len(f.Next(q, &cur, nil, 4)) != 4 {
					b.Fatal("no candidates")
				}
			}
		})
	}
}
