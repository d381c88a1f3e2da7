package fleet

import (
	"time"

	"github.com/egressd/egressd/events"
)

// judge sets a row's health, anonymity, overdue judgement and reason from its health record.
//
// Precedence of REASON: the reason the reconciler recorded explains the phase (ProbeFailing,
// AddressLost, …) and is kept; ProbeOverdue is shown only where the row has no other reason,
// or only ExternalEndpoint. Overdue or not, the row's ProbeOverdue field says so.
func judge(r *Row, h *events.ProxyHealth, now time.Time) {
	var since time.Time
	if r.Status != nil {
		since = r.Status.AddressAt
	}
	if !h.About(r.Address, since) {
		h = nil // a record about another address, or a predecessor at this one, says nothing
	}
	if h != nil {
		r.LastProbeAt = h.LastProbeAt
	}
	// What the proxy reveals is shown while its record is current, as its health is.
	if r.Anonymity = h.AnonymityVerdict(r.Address, since, r.interval, now); r.Anonymity != "" {
		r.LeakedHeaders, r.EgressMismatch = h.LeakedHeaders, h.EgressMismatch()
	}
	switch healthy, judged := h.Verdict(r.Address, since, r.interval, now); {
	case !judged:
		r.Healthy = HealthUnknown
	case healthy:
		r.Healthy = HealthTrue
	default:
		r.Healthy = HealthFalse
	}
	r.ProbeOverdue = probeOverdue(r.Status, r.Address, h, r.interval, now)
	if r.ProbeOverdue && (r.Reason == "" || r.Reason == events.ReasonExternalEndpoint) {
		r.Reason = events.ReasonProbeOverdue
	}
}

// probeOverdue reports whether a proxy the probers should be checking has gone unchecked too
// long: its phase is Running, Ready, Unhealthy or Draining (its leases run on, so the
// crawlers holding them still rely on its health), it has an address and no teardown, and its
// last probe at that address (h, nil if none) or, before the first, the time the address
// appeared (AddressAt, else UpdatedAt) is older than events.ProbeOverdueAfter(interval). A
// probe older than AddressAt does not count: it was of the address's previous instance.
// Without the spec's interval (no spec, an invalid one, or no right to read specs) it is
// not judged.
func probeOverdue(st *events.ProxyStatus, address string, h *events.ProxyHealth, interval time.Duration, now time.Time) bool {
	if st == nil || address == "" || st.Teardown != "" || interval <= 0 {
		return false
	}
	switch st.Phase {
	case events.PhaseRunning, events.PhaseReady, events.PhaseUnhealthy, events.PhaseDraining:
	default:
		return false
	}
	var since time.Time
	if h != nil {
		since = h.LastProbeAt
	}
	switch {
	case since.Before(st.AddressAt):
		// A probe from before the address last appeared (A, then B, then A again) was of
		// another instance: the clock runs from the address.
		since = st.AddressAt
	case since.IsZero():
		since = st.UpdatedAt // a status written before AddressAt existed
	}
	if since.IsZero() {
		return false // nothing to measure from; the reconciler always sets UpdatedAt
	}
	return now.Sub(since) > events.ProbeOverdueAfter(interval)
}
