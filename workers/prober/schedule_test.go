package prober

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A fleet's probes are spread over the interval, not bunched at its top.
func TestSlotsSpreadOverTheInterval(t *testing.T) {
	for _, tc := range []struct {
		n        int
		interval time.Duration
		buckets  int
	}{{10_000, 30 * time.Second, 30}, {2_000, 5 * time.Second, 10}, {500, time.Second, 5}} {
		t.Run(fmt.Sprintf("%d/%v", tc.n, tc.interval), func(t *testing.T) {
			start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			counts := make([]int, tc.buckets)
			for i := range tc.n {
				due := nextSlot(fmt.Sprintf("crawl-%d", i), tc.interval, start)
				off := due.Sub(start)
				if off < 0 || off >= tc.interval {
					t.Fatalf("slot %v is not within one interval of %v", due, start)
				}
				counts[int(off*time.Duration(tc.buckets)/tc.interval)]++
			}
			want := tc.n / tc.buckets
			for b, c := range counts {
				if c < want*7/10 || c > want*13/10 {
					t.Errorf("bucket %d of %d holds %d probes, want about %d: %v", b, tc.buckets, c, want, counts)
				}
			}
		})
	}
}

// Whatever the lateness of a probe, the next one is between half and one and a half
// intervals later, at the proxy's own phase.
func TestNextProbeAfterOne(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 5_000 {
		name := fmt.Sprintf("p%d", i)
		iv := time.Duration(1+r.IntN(60)) * time.Second
		now := base.Add(time.Duration(r.Int64N(int64(time.Hour))))
		next := after(name, iv, now)
		if gap := next.Sub(now); gap < iv/2 || gap > iv+iv/2 {
			t.Fatalf("%s interval %v: next probe %v after this one", name, iv, gap)
		}
		if !nextSlot(name, iv, next).Equal(next) {
			t.Fatalf("%s: %v is off its phase", name, next)
		}
		if again := after(name, iv, next); again.Sub(next) != iv {
			t.Fatalf("%s: on time, the gap is %v, want the interval %v", name, again.Sub(next), iv)
		}
	}
}

func TestDueHeapIsMostOverdueFirst(t *testing.T) {
	var h dueHeap
	base := time.Now()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		h.push(slot{due: base.Add(time.Duration(r.IntN(1e6)) * time.Microsecond), name: fmt.Sprint(i)})
	}
	prev := time.Time{}
	for len(h) > 0 {
		s := h.pop()
		if s.due.Before(prev) {
			t.Fatalf("popped %v after %v", s.due, prev)
		}
		prev = s.due
	}
}

// Compaction keeps exactly the live slots, in heap order.
func TestCompactKeepsLiveSlots(t *testing.T) {
	l := &loop{targets: map[string]*target{}}
	base := time.Now()
	for i := range 100 {
		tg := &target{name: fmt.Sprint(i), owned: true}
		l.targets[tg.name] = tg
		l.owned++
		for k := range 5 { // four stale slots, then the live one
			l.schedule(tg, base.Add(time.Duration(100*k+i)*time.Millisecond))
		}
	}
	l.compact()
	if len(l.heap) != 100 {
		t.Fatalf("%d slots after compaction, want the 100 live ones", len(l.heap))
	}
	prev := time.Time{}
	for len(l.heap) > 0 {
		s := l.heap.pop()
		if tg := l.targets[s.name]; s.gen != tg.gen || s.due.Before(prev) {
			t.Fatalf("slot %+v stale or out of order", s)
		}
		prev = s.due
	}
}
