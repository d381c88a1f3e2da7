package reconciler

import "time"

// Policy holds the lifecycle timings (DESIGN §5.1).
type Policy struct {
	FirstAddrPoll     time.Duration // Get while an instance has no address, at the soonest (see addrPoll)
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
	// TargetCheckStale is the age past which a provider target's failing check no longer
	// holds creates back: its checker may be gone, and then the check says nothing.
	TargetCheckStale time.Duration
	// ReplaceUnhealthyAfter is how long an instance may stay Unhealthy (by the probers'
	// verdict) before it is replaced, unless the brake holds it (brake.go); 0: never.
	ReplaceUnhealthyAfter time.Duration
	// RolloutPoll is how often a proxy waiting for its rollout, or whose retiring instance
	// serves leases, is decided again (rollout.go). There is no drain timeout: a retiring
	// instance is deleted when its last lease ends, by release or by its TTL (decision 98).
	RolloutPoll time.Duration
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
		TargetCheckStale:  5 * time.Minute,
		// Long enough that a proxy a probe path blip or a host's short outage turned
		// Unhealthy recovers first; short enough that a dead VM does not idle for an hour.
		ReplaceUnhealthyAfter: 10 * time.Minute,
		RolloutPoll:           2 * time.Second,
	}
}

// addrPoll is the wait before the next Get of an instance that has had no address for waited
// since its create began: a quarter of waited, at least FirstAddrPoll and at most
// ProvisioningPoll. An address is then read at most a quarter of its own wait after it
// appeared, so kv put -> Running stays within 1.25x of the guest's own time to an address
// however long it boots; a fixed 10 s poll added up to 10 s to a 15 s boot. Reads are
// ~4 in the first 4 s, ~10 more up to 40 s, then one per ProvisioningPoll: a host whose
// guests are slow pays for that with a read every 10 s, as before. Doubling (1, 2, 4, 8 s)
// would read a guest whose address appears at 16 s only at 25 s.
// Without FirstAddrPoll the poll is fixed, as before.
func (p Policy) addrPoll(waited time.Duration) time.Duration {
	if p.FirstAddrPoll <= 0 || p.FirstAddrPoll >= p.ProvisioningPoll {
		return p.ProvisioningPoll
	}
	return min(max(waited/addrPollShare, p.FirstAddrPoll), p.ProvisioningPoll)
}

// addrPollShare: the address poll is waited/addrPollShare.
const addrPollShare = 4
