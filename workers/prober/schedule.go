package prober

import (
	"container/heap"
	"hash/fnv"
	"time"
)

// Each proxy is probed at a fixed phase of its interval, derived from its name: the fleet's
// probes are spread evenly over the interval instead of bunching at its top, and any prober
// that takes a proxy over keeps the cadence its predecessor had.

// hash64 is a stable 64-bit hash of the strings (every process must agree on it), with a
// final mix so that names differing in their last byte still spread over the whole range.
func hash64(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// nextSlot is the first time at or after t at which proxy's phase of interval falls.
func nextSlot(proxy string, interval time.Duration, t time.Time) time.Time {
	if interval <= 0 {
		return t
	}
	iv := int64(interval)
	phase := int64(hash64("phase", proxy) % uint64(iv))
	n := t.UnixNano()
	k := (n - phase + iv - 1) / iv // ceil; t is after 1970, so n-phase+iv-1 > 0
	return time.Unix(0, k*iv+phase)
}

// after is when a proxy probed at now is due next: its first slot at least half an interval
// away, so consecutive probes are between half and one and a half intervals apart whatever
// the lateness of this one, and the proxy returns to its phase.
func after(proxy string, interval time.Duration, now time.Time) time.Time {
	return nextSlot(proxy, interval, now.Add(interval/2))
}

// slot is one scheduled probe. A slot whose gen differs from its target's is stale: the
// target was rescheduled or dropped, and the slot is skipped when it comes up.
type slot struct {
	due  time.Time
	name string
	gen  uint64
}

// dueHeap orders slots by due time, the most overdue first, so a prober that falls behind
// serves its proxies in the order they became due: late, but fair, and none starved.
type dueHeap []slot

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(slot)) }
func (h *dueHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

func (h *dueHeap) push(s slot) { heap.Push(h, s) }
func (h *dueHeap) pop() slot   { return heap.Pop(h).(slot) }
