package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
)

// within calls cond every poll until it holds or budget has passed, and reports whether it
// held. The budget is elapsed time on the monotonic clock: no date, hour or zone enters it.
func within(budget, poll time.Duration, cond func() bool) bool {
	for end := time.Now().Add(budget); !cond(); time.Sleep(poll) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// acquireSeen acquires until seen accepts the lease (the leasers' view has caught up with a
// spec just written), releasing the others, for at most 10 s, and returns the last lease.
func acquireSeen(t *testing.T, ctx context.Context, c *client.Client, o client.AcquireOptions, seen func(*client.Lease) bool) *client.Lease {
	t.Helper()
	var l *client.Lease
	within(10*time.Second, 50*time.Millisecond, func() bool {
		if l != nil {
			_ = l.Release(ctx) // the service had not seen the spec yet
		}
		var err error
		if l, err = c.Acquire(ctx, o); err != nil {
			t.Fatal(err)
		}
		return seen(l)
	})
	return l
}
