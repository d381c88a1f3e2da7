package events

import "time"

// Event kinds, the second token of egress.events.<kind>.<proxy>.
const (
	KindPhase    = "phase"     // a proxy changed phase
	KindOpResult = "op"        // a provisioner finished (or retried) an op
	KindInvalid  = "invalid"   // a spec was rejected
	KindDeleted  = "deleted"   // a proxy and its instance are gone
	KindReplaced = "replacing" // a spec change started a replacement
)

// Event is a human-facing record on EGRESS_EVENTS. Op results are published with Kind op and
// the OpResult in Op.
type Event struct {
	V       int       `json:"v"`
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Proxy   string    `json:"proxy"`
	At      time.Time `json:"at"`
	Phase   Phase     `json:"phase,omitempty"`
	From    Phase     `json:"from,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Op      *OpResult `json:"op,omitempty"`
}
