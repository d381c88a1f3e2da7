package events

import "time"

// Event kinds, the second token of egress.events.<kind>.<proxy>.
const (
	KindPhase    = "phase"    // a proxy changed phase
	KindOpResult = "op"       // a provisioner finished (or retried) an op
	KindDeleted  = "deleted"  // a proxy and its instance are gone
	KindHealth   = "health"   // a proxy turned healthy or unhealthy
	KindLease    = "lease"    // a lease was granted, renewed, released or expired
	KindReport   = "report"   // a crawler reported a proxy blocked, failed or ok
	KindGC       = "gc"       // the orphan collector deleted something
	KindProvider = "provider" // a provider target turned ready or not ready
	KindProgress = "progress" // a long provider task moved on (image download, upload)
	KindProber   = "prober"   // a prober fell behind its schedule or caught up (subject token: its member ID)
)

// Kinds is every event kind, in the order the constants list them.
var Kinds = []string{KindPhase, KindOpResult, KindDeleted, KindHealth, KindLease, KindReport, KindGC, KindProvider,
	KindProgress, KindProber}

// Event is a human-facing record on EGRESS_EVENTS. Op results are published with Kind op and
// the OpResult in Op.
type Event struct {
	V       int           `json:"v"`
	ID      string        `json:"id"`
	Kind    string        `json:"kind"`
	Proxy   string        `json:"proxy"`
	At      time.Time     `json:"at"`
	Phase   Phase         `json:"phase,omitempty"`
	From    Phase         `json:"from,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	Message string        `json:"message,omitempty"`
	Op      *OpResult     `json:"op,omitempty"`
	Health  *ProxyHealth  `json:"health,omitempty"`
	Lease   *LeaseEvent   `json:"lease,omitempty"`
	GC      *GCDeletion   `json:"gc,omitempty"`
	Target  *TargetHealth `json:"target,omitempty"`
	Prober  *ProberLag    `json:"prober,omitempty"`
}

// LeaseEvent describes a lease event (Reason: granted, renewed, released, expired, reported).
type LeaseEvent struct {
	ID     string    `json:"id"`
	Holder string    `json:"holder,omitempty"`
	Target string    `json:"target,omitempty"`
	Result string    `json:"result,omitempty"` // report result
	Until  time.Time `json:"until,omitzero"`   // expiry or cooldown end
}
