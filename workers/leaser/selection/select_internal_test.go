package selection

import (
	"slices"
	"testing"
)

func TestLeaseFreeSlots(t *testing.T) {
	held := func(slots ...int) map[int]Slot {
		m := map[int]Slot{}
		for _, s := range slots {
			m[s] = Slot{}
		}
		return m
	}
	for _, tc := range []struct {
		max   int
		held  []int
		count int
	}{
		{0, nil, 0}, {1, nil, 1}, {1, []int{0}, 0}, {3, []int{1}, 2}, {2, []int{5, 7}, 2}, // slots above max drain
		{10000, nil, SlotsPerCandidate}, {10000, []int{0, 1, 2}, SlotsPerCandidate},
	} {
		p := &proxyView{maxLeases: tc.max, slots: map[int]Slot{}}
		for s := range held(tc.held...) {
			p.setSlot(s, Slot{})
		}
		got := freeSlots(p, SlotsPerCandidate)
		if len(got) != tc.count || hasFreeSlot(p) != (tc.count > 0) {
			t.Errorf("max %d held %v: %v", tc.max, tc.held, got)
		}
		seen := map[int]bool{}
		for _, s := range got {
			if s < 0 || s >= tc.max || slices.Contains(tc.held, s) || seen[s] {
				t.Errorf("max %d held %v: slot %d in %v", tc.max, tc.held, s, got)
			}
			seen[s] = true
		}
	}
	// Nearly full: the free ones are found by enumeration.
	p := &proxyView{maxLeases: 1000, slots: map[int]Slot{}}
	for s := range 999 {
		if s != 500 {
			p.setSlot(s, Slot{})
		}
	}
	if got := freeSlots(p, SlotsPerCandidate); !slices.Equal(got, []int{500, 999}) && !slices.Equal(got, []int{999, 500}) {
		t.Fatalf("nearly full: %v", got)
	}
}
