package reconciler

import "time"

// Policy holds the lifecycle timings (DESIGN §5.1).
type Policy struct {
	ProvisioningPoll  time.Duration // Get while an instance has no address
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
