package reconciler

import (
	"time"

	"github.com/egressd/egressd/workers"
)

// Policy holds the lifecycle timings (DESIGN §5.1).
type Policy struct {
	FirstAddrPoll     time.Duration // first Get after a read without an address; doubles up to ProvisioningPoll
	ProvisioningPoll  time.Duration // Get while an instance has no address, at the longest
	DriftPoll         time.Duration // Get while it runs
	DeletionPoll      time.Duration // Delete again while it is still there
	QuotaRetry        time.Duration // Waiting after a quota error
	ProvisionDeadline time.Duration // from create to an address
	MaxDeadlines      int           // missed deadlines before Failed
	BackoffBase       time.Duration // transient failures: base·2^(n-1)
	BackoffMax        time.Duration
	OpTimeout         time.Duration // an op with no result for this long is issued again
	AddrMissLimit     int           // consecutive polls without an address before it is cleared
}

// DefaultPolicy is the policy of DESIGN §5.1.
func DefaultPolicy() Policy {
	return Policy{
		FirstAddrPoll:     time.Second,
		ProvisioningPoll:  10 * time.Second,
		DriftPoll:         2 * time.Minute,
		DeletionPoll:      10 * time.Second,
		QuotaRetry:        5 * time.Minute,
		ProvisionDeadline: 15 * time.Minute,
		MaxDeadlines:      3,
		BackoffBase:       5 * time.Second,
		BackoffMax:        5 * time.Minute,
		OpTimeout:         5 * time.Minute,
		AddrMissLimit:     3,
	}
}

// addrPoll is the wait before the next Get of an instance that has had no address in n reads
// since its create began: FirstAddrPoll·2^(n-1), at most ProvisioningPoll. A VM gets its address
// seconds after it is defined, so a fixed 10 s poll added up to 10 s to every boot; backing off
// keeps a slow one (a cold image, a busy host) from costing more than a read every 10 s.
// Without FirstAddrPoll the poll is fixed, as before.
func (p Policy) addrPoll(n int) time.Duration {
	if p.FirstAddrPoll <= 0 || p.FirstAddrPoll >= p.ProvisioningPoll {
		return p.ProvisioningPoll
	}
	return workers.Backoff(n, p.FirstAddrPoll, p.ProvisioningPoll)
}
