package leaser

import (
	"testing"
	"time"
)

// A shard stands still only when a write of this replica has waited echoWait for its echo:
// writes answered out of order, echoes that overtake the write's return, and a steady stream
// of writes whose echoes always trail the newest write all keep it fresh.
func TestFreshnessJudgesByTheOldestUnechoedWrite(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := int(echoWait / time.Millisecond) // the cases in steps of it: w/5, w-1, 3w
	f := w / 5
	type step struct {
		wrote, echoed uint64 // one of them
		ms            int    // when
	}
	for _, tc := range []struct {
		name  string
		steps []step
		ms    int // judged at
		still bool
	}{
		{"no write", nil, 5 * w, false},
		{"echoed at once", []step{{wrote: 5, ms: 0}, {echoed: 5, ms: 1}}, 5 * w, false},
		{"the echo overtook the write's return", []step{{echoed: 5, ms: 0}, {wrote: 5, ms: 1}}, 5 * w, false},
		{"a later echo covers an earlier write", []step{{wrote: 5, ms: 0}, {echoed: 9, ms: 2}}, 5 * w, false},
		{"not echoed, younger than echoWait", []step{{wrote: 5, ms: 0}}, w - 1, false},
		{"not echoed for echoWait", []step{{wrote: 5, ms: 0}}, w, true},
		{"answered out of order, both echoed", []step{{wrote: 7, ms: 0}, {wrote: 6, ms: 1}, {echoed: 7, ms: 2}}, 5 * w, false},
		{"echoes trailing a steady stream of writes", []step{
			{wrote: 1, ms: 0}, {wrote: 2, ms: 2 * f}, {echoed: 1, ms: 2*f + 1}, {wrote: 3, ms: 4 * f}, {echoed: 2, ms: 4*f + 1},
			{wrote: 4, ms: 6 * f}, {echoed: 3, ms: 6*f + 1}, {wrote: 5, ms: 8 * f}, {echoed: 4, ms: 8*f + 1},
		}, 9 * f, false},
		{"the echoes stop", []step{{wrote: 1, ms: 0}, {echoed: 1, ms: 1}, {wrote: 2, ms: 2 * f}, {wrote: 3, ms: 4 * f}}, 2*f + w, true},
		{"the watch catches up", []step{{wrote: 1, ms: 0}, {wrote: 2, ms: 2 * f}, {echoed: 2, ms: 3 * w}}, 3*w + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFreshness(2)
			for _, s := range tc.steps {
				if s.wrote != 0 {
					f.wrote(1, s.wrote, at(s.ms))
				} else {
					f.echoed(1, s.echoed)
				}
			}
			if got := f.standsStill(1, at(tc.ms)); got != tc.still {
				t.Errorf("stands still: %v, want %v", got, tc.still)
			}
			if f.standsStill(0, at(tc.ms)) {
				t.Error("the other shard stands still")
			}
		})
	}
}

// The writes remembered while echoes are missing are bounded; the oldest stays, so the
// shard still stands still.
func TestFreshnessBoundsWhatItRemembers(t *testing.T) {
	f := newFreshness(1)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 3 * maxPending {
		f.wrote(0, uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(f.shards[0].pending); n != maxPending {
		t.Errorf("%d writes remembered, want at most %d", n, maxPending)
	}
	if !f.standsStill(0, t0.Add(echoWait)) {
		t.Error("the oldest write, echoWait old, does not count")
	}
	f.echoed(0, 3*maxPending)
	if f.standsStill(0, t0.Add(time.Hour)) || len(f.shards[0].pending) != 0 {
		t.Error("caught up, but still standing still")
	}
}
