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
			for c.wait(now) == 0 {
				c.took(now)
				free++
			}
			if free != tc.free {
				t.Errorf("%d creates at once, want %d", free, tc.free)
			}
			if w := c.wait(now); w <= 0 || w > time.Second {
				t.Errorf("next create in %v, want within a second", w)
			}
		})
	}
	c := newCreateLimit(60, 1, nil, now)
	c.took(now)
	c.took(now) // credentials delivered without a token
	if got := c.wait(now); got != 2*time.Second {
		t.Errorf("after a create in debt the next may go in %v, want 2s", got)
	}
}

// A clock that steps back and forth mints no tokens: ten creates at one a second, each at a
// time that first jumps back 5 s and then returns, are spread over ten seconds, not handed
// out as the limiter counts the same seconds twice.
func TestCreateLimitClockStepsBack(t *testing.T) {
	c := newCreateLimit(60, 1, nil, t0)
	c.took(t0)
	for i := range 10 {
		now := t0.Add(time.Duration(i+1) * time.Second)
		c.wait(now.Add(-5 * time.Second)) // a reading from before a step back
		if w := c.wait(now); w != 0 {
			t.Fatalf("create %d at +%ds waits %v, want none", i+2, i+1, w)
		}
		c.took(now)
		if w := c.wait(now); w != time.Second {
			t.Fatalf("after create %d at +%ds the next waits %v, want 1s", i+2, i+1, w)
		}
	}
	c.took(t0) // a create counted at an old time takes its token now
	if w := c.wait(t0.Add(10 * time.Second)); w != 2*time.Second {
		t.Errorf("after a create counted at an old time the next waits %v, want 2s", w)
	}
}
