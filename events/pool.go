package events

import "time"

// Buckets of pools (DESIGN §3.1, §5.7).
const (
	BucketPools      = "pools"       // PoolSpec by pool name, written by users
	BucketPoolStatus = "pool_status" // PoolStatus by pool name, written by the pool controller only
)

// LockLeaderPools is the pool controller's leader lease in egress_locks.
const LockLeaderPools = "leader.pools"

// PhaseDraining is a member (or any proxy with "drain": true) that is never leased again
// while the leases it holds run on until they are released, expire, or the pool's drain
// timeout deletes it.
const PhaseDraining Phase = "Draining"

// PoolPhase is a pool's state as its controller last judged it.
type PoolPhase string

// Pool phases.
const (
	PoolInvalid     PoolPhase = "Invalid"     // the spec does not parse or validate: nothing is done
	PoolProgressing PoolPhase = "Progressing" // members are being created, replaced, drained or deleted
	PoolReady       PoolPhase = "Ready"       // replicas members, all current and Ready
	PoolDegraded    PoolPhase = "Degraded"    // nothing to do, but fewer than replicas members are Ready
	PoolDeleting    PoolPhase = "Deleting"    // the pool was deleted: its members are being deleted
)

// Reasons of pool decisions: why a member is replaced (its Retire reason), and what the
// controller did or is waiting for.
const (
	ReasonMaxAge Reason = "MaxAge" // the member reached its maximum age
	// ReasonLifetimeEnding: the member's instance nears the end of its lifetime
	// (maxLifetimeSeconds): it is replaced successor-first before the collector deletes it.
	ReasonLifetimeEnding  Reason = "LifetimeEnding"
	ReasonTemplateChanged Reason = "TemplateChanged" // the template or the member's placement changed in a way that needs a new instance
	ReasonBurned          Reason = "Burned"          // crawlers reported it blocked on enough distinct targets
	ReasonMemberFailed    Reason = "MemberFailed"    // its instance is Failed (latched by the reconciler): only a new member helps
	ReasonScaleDown       Reason = "ScaleDown"       // replicas was lowered
	ReasonPoolDeleted     Reason = "PoolDeleted"     // the pool was deleted

	ReasonMemberCreated  Reason = "MemberCreated"  // a member spec was written to proxies
	ReasonMemberUpdated  Reason = "MemberUpdated"  // a member spec was updated in place (attributes, leases, health, auth)
	ReasonMemberReverted Reason = "MemberReverted" // a hand edit of a member spec was undone
	ReasonMemberLost     Reason = "MemberLost"     // a member's spec was deleted or disowned by hand; a new member takes its place
	ReasonMemberAdopted  Reason = "MemberAdopted"  // a spec naming the pool as owner was taken in
	ReasonMemberDeleted  Reason = "MemberDeleted"  // a member spec was deleted from proxies
	ReasonDrainStarted   Reason = "DrainStarted"   // a member is no longer leased; its leases run on
	ReasonDrainTimeout   Reason = "DrainTimeout"   // a draining member still had leases at the drain timeout
	ReasonRotationHeld   Reason = "RotationHeld"   // a replacement waits: minAvailable and maxSurge leave no room
	ReasonScaledUp       Reason = "ScaledUp"       // autoscale raised the member count: demand passed the target
	ReasonScaledDown     Reason = "ScaledDown"     // autoscale lowered the member count: demand stayed low for scaleDownAfterSeconds
	// ReasonPlacementFallback: a placement answered Quota or its provider target fails its
	// check, so new members go to the next placement; also the Retire reason of a member
	// stuck there, replaced successor-first at the next placement.
	ReasonPlacementFallback Reason = "PlacementFallback"
	// ReasonPlacementRestored: a placement's hold ended; new members may go there again.
	ReasonPlacementRestored Reason = "PlacementRestored"
)

// PoolStatus is what the pool controller (its only writer, with compare-and-set) records of a
// pool in pool_status. Members is the pool's ledger: a member is recorded here before its
// spec is written to proxies and removed only after the spec is deleted, so the proxies a
// pool owns are never more than its recorded members, and the cap on those is checked in the
// same compare-and-set that records one.
type PoolStatus struct {
	V            int          `json:"v"`
	Phase        PoolPhase    `json:"phase"`
	Reason       Reason       `json:"reason,omitempty"`
	Message      string       `json:"message,omitempty"`
	SpecRevision uint64       `json:"specRevision,omitempty"` // the pools revision last acted on
	Replicas     int          `json:"replicas"`
	MaxMembers   int          `json:"maxMembers"` // replicas + maxSurge, the cap
	Members      []PoolMember `json:"members"`
	NextRotation time.Time    `json:"nextRotation,omitzero"` // the earliest member's rotation time
	// Autoscale is the autoscaler's state, for a pool with autoscale: kept here, in the
	// record every controller reads, so that a takeover carries on the same decision.
	Autoscale *PoolAutoscale `json:"autoscale,omitempty"`
	// Boots is the last boots of the pool's members (kv put to Ready), newest last, at most
	// BootSamples: kept in the record, so a controller taking over sizes spares the same.
	Boots []BootSample `json:"boots,omitempty"`
	// Boot is Boots summed up: p50 and p90.
	Boot *BootStats `json:"boot,omitempty"`
	// Placements is each placement of the spec with its members, and a hold that keeps new
	// members away from it (a Quota answer, a failing provider target).
	Placements []PlacementStatus `json:"placements,omitempty"`
	UpdatedAt  time.Time         `json:"updatedAt"`
}

// BootSamples is how many boots a pool's record keeps.
const BootSamples = 20

// BootSample is one member's boot: from its spec's put (the reconciler's createdAt) to its
// first Ready.
type BootSample struct {
	Member    string    `json:"member"`
	Placement int       `json:"placement"`
	Seconds   float64   `json:"seconds"`
	At        time.Time `json:"at"` // when it became Ready
}

// BootStats is the quantiles of a pool's last boots.
type BootStats struct {
	Samples    int     `json:"samples"`
	P50Seconds float64 `json:"p50Seconds"`
	P90Seconds float64 `json:"p90Seconds"`
}

// PlacementStatus is one placement of a pool: where it is, its members, and a hold.
type PlacementStatus struct {
	Index    int    `json:"index"`
	Provider string `json:"provider"`
	Zone     string `json:"zone,omitempty"`
	Members  int    `json:"members"` // serving members there (not draining)
	Ready    int    `json:"ready"`
	// Hold keeps new members from the placement until Until: a member there answered Quota,
	// or waits on its failing provider target.
	Hold *PlacementHold `json:"hold,omitempty"`
}

// PlacementHold is why, and until when, a placement gets no new members.
type PlacementHold struct {
	Reason  Reason    `json:"reason"` // QuotaExceeded or ProviderUnhealthy (the member's status reason)
	Message string    `json:"message,omitempty"`
	Member  string    `json:"member,omitempty"` // the member whose status said so
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
}

// PoolAutoscale is what the autoscaler decided and from what. Replicas of the record is
// Desired.
type PoolAutoscale struct {
	Desired int         `json:"desired"`
	Inputs  ScaleInputs `json:"inputs"`
	// LowSince is when demand fell below what the members serve at the target; the count
	// goes down at NextScaleDown (LowSince + scaleDownAfterSeconds) if it stays low.
	LowSince      time.Time `json:"lowSince,omitzero"`
	NextScaleDown time.Time `json:"nextScaleDown,omitzero"`
	// Held says why a scale-down waits although its time has come: every member above the
	// wanted count holds a lease.
	Held           string    `json:"held,omitempty"`
	LastDecision   string    `json:"lastDecision,omitempty"` // "3 → 5: 6 waiting, 8/8 leased, target 0.8"
	LastDecisionAt time.Time `json:"lastDecisionAt,omitzero"`
}

// ScaleInputs is what one autoscale decision looked at.
type ScaleInputs struct {
	Held            int     `json:"held"`    // lease slots held on the pool's serving members
	Waiting         int     `json:"waiting"` // acquires waiting now, summed over the leasers
	Refused         int     `json:"refused"` // acquires refused in the leasers' window
	GrantsPerSecond float64 `json:"grantsPerSecond"`
	Members         int     `json:"members"`  // serving members (not draining)
	Ready           int     `json:"ready"`    // of those, Ready
	Capacity        int     `json:"capacity"` // Ready × maxLeases
	Target          float64 `json:"target"`   // targetUtilization
	Wanted          int     `json:"wanted"`   // what the demand asks for, within min and max
	Leasers         int     `json:"leasers"`  // leaser records the demand came from
	// Spares is the idle Ready members kept above the demand (autoscale.spares, computed
	// from the grant rate and the boot time with auto); SparesFrom says how, in words.
	Spares     int    `json:"spares,omitempty"`
	SparesFrom string `json:"sparesFrom,omitempty"`
}

// PoolMember is one member in a pool's ledger.
type PoolMember struct {
	Name      string    `json:"name"`
	Placement int       `json:"placement"` // index into the spec's placements (0 when it has none)
	CreatedAt time.Time `json:"createdAt"`
	RotateAt  time.Time `json:"rotateAt,omitzero"` // its maximum age with jitter; zero: never
	// Rev is the proxies revision of the member spec as the controller last wrote it: a spec
	// at another revision was edited by someone else.
	Rev uint64 `json:"rev,omitempty"`
	// Retire says why the member is being replaced; Successor is the member taking its place.
	Retire    Reason `json:"retire,omitempty"`
	Successor string `json:"successor,omitempty"`
	// DrainingSince is when its spec was marked drain; Deleting, that its spec is being
	// deleted (it leaves the ledger once it is gone).
	DrainingSince time.Time `json:"drainingSince,omitzero"`
	Deleting      bool      `json:"deleting,omitempty"`
	// DrainSeen is when the controller first saw its spec say drain: the settle before its
	// leases are counted runs from then, not from DrainingSince, since the spec's write may
	// land much later than the ledger's (a kill between them, a write retried).
	DrainSeen time.Time `json:"drainSeen,omitzero"`
	// Booted says its boot is in the record's Boots (counted once).
	Booted bool `json:"booted,omitempty"`
	// QuarantineRound, when above 0, says the member replaced a burned one (1) or one
	// replaced for a quarantined egress (its round + 1): its egress is checked against the
	// quarantine until a probe has seen it leave from elsewhere (then 0).
	QuarantineRound int `json:"quarantineRound,omitempty"`
}

// PoolEvent is the detail of a pool event.
type PoolEvent struct {
	Pool      string `json:"pool"`
	Member    string `json:"member,omitempty"`
	Successor string `json:"successor,omitempty"`
	Leases    int    `json:"leases,omitempty"` // leases the member held when it was drained or deleted
	// Scale is an autoscale decision: the member count before and after, and its inputs.
	Scale *PoolScale `json:"scale,omitempty"`
	// Fallback is a placement's hold starting: new members go to To instead of From.
	Fallback *PlacementFallback `json:"fallback,omitempty"`
	// Quarantine is the address an AddressQuarantined, Quarantined or QuarantineKept event
	// is about.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
}

// PlacementFallback is where new members go instead of a placement on hold, and why.
type PlacementFallback struct {
	From int           `json:"from"`
	To   int           `json:"to"` // -1: every placement is on hold; members wait where they are
	Hold PlacementHold `json:"hold"`
}

// PoolScale is an autoscale decision in a pool event.
type PoolScale struct {
	From   int         `json:"from"`
	To     int         `json:"to"`
	Inputs ScaleInputs `json:"inputs"`
}
