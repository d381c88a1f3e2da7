package reconciler

import (
	"testing"
	"time"
)

// The bucket starts with its burst less the creates sent within its refill time, never more
// (a takeover adds no burst), and every create takes a token, one sent without a token
// putting it in debt.
func TestCreateLimit(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name   string
		recent []time.Time
		free   int // creates that may go at once
	}{
		{"a fresh start has the whole burst", nil, 3},
		{"creates within the refill time are spent", []time.Time{now.Add(-time.Second), now.Add(-2 * time.Second)}, 1},
		{"older ones are not", []time.Time{now.Add(-time.Minute)}, 3},
		{"never below empty", []time.Time{now, now, now, now, now}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCreateLimit(60, 3, tc.recent, now) // one a second, three at once; refill 3 s
			free := 0
			for c.next(now).IsZero() {
				c.took(now)
				free++
			}
			if free != tc.free {
				t.Errorf("%d creates at once, want %d", free, tc.free)
			}
			if next := c.next(now); next.Sub(now) <= 0 || next.Sub(now) > time.Second {
				t.Errorf("next create in %v, want within a second", next.Sub(now))
			}
		})
	}
	c := newCreateLimit(60, 1, nil, now)
	c.took(now)
	c.took(now) // credentials delivered without a token
	if got := c.next(now).Sub(now); got != 2*time.Second {
		t.Errorf("after a create in debt the next may go in %v, want 2s", got)
	}
}
