package events

import "time"

// EventKind is what an event is about, the second token of egress.events.<kind>.<proxy>.
type EventKind string

// Event kinds.
const (
	KindPhase    EventKind = "phase"    // a proxy changed phase
	KindOpResult EventKind = "op"       // a provisioner finished (or retried) an op
	KindDeleted  EventKind = "deleted"  // a proxy and its instance are gone
	KindHealth   EventKind = "health"   // a proxy turned healthy or unhealthy
	KindLease    EventKind = "lease"    // a lease was granted, renewed, released or expired
	KindReport   EventKind = "report"   // a crawler reported a proxy blocked, failed or ok
	KindGC       EventKind = "gc"       // the orphan collector deleted something
	KindProvider EventKind = "provider" // a provider target turned ready or not ready
	KindProgress EventKind = "progress" // a long provider task moved on (image download, upload)
	KindProber   EventKind = "prober"   // a prober fell behind its schedule or caught up (subject token: its member ID)
	KindPool     EventKind = "pool"     // the pool controller decided something (subject token: the pool's name)
	// KindLeaseMaster: a lease master rotation moved on (subject token: "installation").
	KindLeaseMaster EventKind = "leasemaster"
)

// Kinds is every event kind, in the order the constants list them.
var Kinds = []EventKind{KindPhase, KindOpResult, KindDeleted, KindHealth, KindLease, KindReport, KindGC, KindProvider,
	KindProgress, KindProber, KindPool, KindLeaseMaster}

// Event is a human-facing record on an event stream (EventStream: EGRESS_EVENTS for the
// lifecycle, EGRESS_LEASE_EVENTS for the lease kinds). Op results are published with Kind op and
// the OpResult in Op.
type Event struct {
	V       int           `json:"v"`
	ID      string        `json:"id"`
	Kind    EventKind     `json:"kind"`
	Proxy   string        `json:"proxy"`
	At      time.Time     `json:"at"`
	Phase   Phase         `json:"phase,omitempty"`
	From    Phase         `json:"from,omitempty"`
	Reason  Reason        `json:"reason,omitempty"`
	Message string        `json:"message,omitempty"`
	Op      *OpResult     `json:"op,omitempty"`
	Health  *ProxyHealth  `json:"health,omitempty"`
	Lease   *LeaseEvent   `json:"lease,omitempty"`
	GC      *GCDeletion   `json:"gc,omitempty"`
	Target  *TargetHealth `json:"target,omitempty"`
	Prober  *ProberLag    `json:"prober,omitempty"`
	Pool    *PoolEvent    `json:"pool,omitempty"`
}

// Reasons of lease events. A report event's reason is its ReportResult.
const (
	ReasonGranted  Reason = "granted"
	ReasonRenewed  Reason = "renewed"
	ReasonReleased Reason = "released"
	ReasonExpired  Reason = "expired"
	// The service ended the lease: its proxy was deleted (ReasonProxyDeleted, as the
	// reconciler's), or the instance it was granted on is gone or going.
	ReasonProxyReplaced Reason = "ProxyReplaced"
)

// ReasonOrphanDeleted is the reason of a gc event.
const ReasonOrphanDeleted Reason = "OrphanDeleted"

// LeaseEvent describes a lease event.
type LeaseEvent struct {
	ID     string       `json:"id"`
	Holder string       `json:"holder,omitempty"`
	Target string       `json:"target,omitempty"`
	Result ReportResult `json:"result,omitempty"` // report result
	Until  time.Time    `json:"until,omitzero"`   // expiry or cooldown end
	// AcquiredAt is when the lease was granted, on a lease's end: with the default raw mode
	// (RawEnds) the end is the one event a lease leaves, and tells its whole span.
	AcquiredAt time.Time `json:"acquiredAt,omitzero"`
}
