package events

import "time"

// Tiers on the server (docs/leases.md#tiers): an acquire may name ordered selectors, cheapest
// first; the leasers keep, per target and list of tiers, the tier the target is at, shared
// in lease_state, moving it up after blocks and probing it back down after a quiet period.

// MaxTiers bounds the tiers of one acquire.
const MaxTiers = 8

// TierReason says why an acquire was granted on the tier it was.
type TierReason string

// Tier reasons.
const (
	// TierCheapest: the target has no recent blocks that moved it: the first tier.
	TierCheapest TierReason = "cheapest"
	// TierBlocked: blocks on the tier below moved the target up to this one.
	TierBlocked TierReason = "blocked"
	// TierProbe: the target went a quiet period without a block on the tier above, so it
	// was moved back down to probe this one; a block here moves it up again at once until a
	// quiet period has passed here.
	TierProbe TierReason = "probe"
	// TierFallback: the target's tier had no proxy free (nothing matching, Ready, free and
	// not cooling down for the target), and this one, higher up, did. The target stays where
	// it was.
	TierFallback TierReason = "fallback"
)

// TierState is the value of tier.<b64url(target)>.<tiers hash> in lease_state: where one
// target stands in one list of tiers. Its TTL is the leaser's tier memory, renewed with every
// write: a target unseen that long starts again at the first tier.
type TierState struct {
	V      int        `json:"v"`
	Target string     `json:"target"`
	Of     int        `json:"of"`     // how many tiers the list has
	Tier   int        `json:"tier"`   // the target's tier, 0-based
	Reason TierReason `json:"reason"` // why it is there: cheapest, blocked or probe
	Since  time.Time  `json:"since"`  // when it moved there
	// Blocks counts the blocked reports on the tier since it moved there; LastBlockAt is the
	// latest (zero: none). The quiet period counts from the later of Since and LastBlockAt.
	Blocks      int       `json:"blocks,omitempty"`
	LastBlockAt time.Time `json:"lastBlockAt,omitzero"`
}

// LeaseTier is, in a lease granted in tiers, which tier it was granted on (0-based), of how
// many, and the key of its target's tier state: what a blocked report needs to move the
// target.
type LeaseTier struct {
	Key   string `json:"key"`
	Index int    `json:"index"`
	Of    int    `json:"of"`
}

// TierChoice is, in an acquire's reply, the tier the lease was granted on (1 is the first),
// of how many, its selector, why that tier, and since when the target is at its tier.
type TierChoice struct {
	Tier     int               `json:"tier"`
	Of       int               `json:"of"`
	Selector map[string]string `json:"selector"`
	Reason   TierReason        `json:"reason"`
	Since    time.Time         `json:"since,omitzero"`
}
