package events

import "time"

// Sessions, strategies and per-holder caps of the lease service (docs/leases.md#sessions).

// BucketLeaseState holds what leases share beyond their slots, each key with a TTL:
// holder slots holder.<pool>.<b64url(holder)>.<n> ("_" for proxies in no pool) that cap the
// leases of one holder exactly across leasers, and sticky sessions session.<b64url(sticky)>
// that bind a sticky key to a proxy for a lifetime.
const BucketLeaseState = "lease_state"

// Strategy orders the eligible proxies of an acquire.
type Strategy string

// Strategies. Balanced is the default.
const (
	StrategyBalanced      Strategy = "balanced"       // fewest active leases, least recently leased, lowest latency, name
	StrategyRoundRobin    Strategy = "round-robin"    // least recently leased first, whatever their load
	StrategyRandom        Strategy = "random"         // uniformly at random among the eligible
	StrategyLowestLatency Strategy = "lowest-latency" // lowest probe latency first (unknown last), then balanced
	// StrategyBestForTarget: the proxies that did best lately on the acquire's target first,
	// exploring those without history there at a configured rate (docs/leases.md#best-for-target).
	StrategyBestForTarget Strategy = "best-for-target"
	// StrategyPacked: the balanced order read from its end, so the most active leases first
	// among the proxies with a free slot: the fewest proxies carry the leases, and the rest
	// fall idle, which is what lets an autoscaled pool drain its surplus (only idle members
	// are drained) as soon as demand falls.
	StrategyPacked Strategy = "packed"
)

// Strategies lists the strategies, the default first.
var Strategies = []Strategy{StrategyBalanced, StrategyRoundRobin, StrategyRandom, StrategyLowestLatency, StrategyBestForTarget, StrategyPacked}

// StickyMode says what an acquire of a sticky session does when the session's proxy is not
// available.
type StickyMode string

// Sticky modes. Soft is the default.
const (
	StickySoft   StickyMode = "soft"   // move to another proxy and bind the session to it
	StickyStrict StickyMode = "strict" // fail, naming why, rather than switch proxies
)

// Session is the value of session.<b64url(sticky)> in lease_state: the proxy a sticky key is bound
// to until Until, which is also the key's TTL. A soft session that moves keeps its Until.
type Session struct {
	V       int       `json:"v"`
	Sticky  string    `json:"sticky"`
	Proxy   string    `json:"proxy"`
	BoundAt time.Time `json:"boundAt"`
	Until   time.Time `json:"until"`
}

// HolderSlot is the value of a holder slot holder.<pool>.<b64url(holder)>.<n> in lease_state
// (n below the holder's limit in the pool). It is created before its lease's proxy slot and
// outlives it, so a holder never has more live leases than holder slots.
type HolderSlot struct {
	V      int    `json:"v"`
	Holder string `json:"holder"`
	Pool   string `json:"pool,omitempty"` // "" for proxies in no pool
	Token  string `json:"token"`          // the hold's own, kept in the lease (LeaseHold)
}

// LeaseHold names a lease's holder slot: its key in lease_state and its token.
type LeaseHold struct {
	Key   string `json:"key"`
	Token string `json:"token"`
}

// ErrorReason refines an error code: why exactly an acquire was refused.
type ErrorReason string

// Error reasons.
const (
	// ErrorHolderAtCap (429): the holder holds as many leases as it may in the pool;
	// ErrorDetail.Limit is that limit.
	ErrorHolderAtCap ErrorReason = "HolderAtCap"
	// ErrorSessionUnavailable (503): a strict session's proxy cannot be leased now;
	// ErrorDetail.Session says which proxy and why.
	ErrorSessionUnavailable ErrorReason = "SessionUnavailable"
	// ErrorShardUnavailable (503, with the retry hint): every candidate left, or the lease a
	// renew or release names, lies in a lease shard whose stream has no leader right now (a
	// NATS node was lost and its Raft group is electing one, seconds); ErrorDetail.Shards says
	// which shards and how many candidates were passed over for them. The same request sent
	// again shortly may succeed: clients retry it with backoff (docs/leases.md#shards).
	ErrorShardUnavailable ErrorReason = "ShardUnavailable"
)

// SessionCause is why a session's proxy cannot be leased.
type SessionCause string

// Session causes.
const (
	SessionProxyDeleted    SessionCause = "Deleted"        // no valid spec
	SessionProxyDraining   SessionCause = "Draining"       // its spec says drain
	SessionProxyNotReady   SessionCause = "NotReady"       // phase is not Ready (SessionDetail.Phase says which)
	SessionProxyNotMatched SessionCause = "NotMatching"    // its attributes do not match the selector
	SessionProxyBelowAnon  SessionCause = "BelowAnonymity" // less anonymous than minAnonymity
	SessionProxyAtCapacity SessionCause = "AtCapacity"     // every slot taken
	SessionProxyCooling    SessionCause = "CoolingDown"    // cooling down for the target or every target
)

// SessionDetail is the session part of a SessionUnavailable error.
type SessionDetail struct {
	Proxy string       `json:"proxy"`
	Cause SessionCause `json:"cause"`
	Phase Phase        `json:"phase,omitempty"` // with NotReady
	Until time.Time    `json:"until"`           // the end of the session's binding
}
