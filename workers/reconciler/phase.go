package reconciler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// The phase a decision ends in, from the status, the probers' verdict and the proxy's
// anonymity: Decide's last step, kept apart from the steps that act on the instance.

// finish derives the phase, the phase-change event, and the decision.
func (d *decider) finish() Decision {
	dec := Decision{Ops: d.ops, Wake: d.wake}
	old := events.Phase("")
	if d.in.Status != nil {
		old = d.in.Status.Phase
	}
	if d.remove || d.st == nil {
		if d.in.Status != nil {
			dec.Events = append(dec.Events, events.Event{V: 1, Kind: events.KindDeleted, Proxy: d.in.Name, At: d.now, From: old, Reason: events.ReasonProxyDeleted, Message: "proxy and instance removed"})
		}
		return dec
	}
	d.st.Phase = d.phase()
	if d.st.Phase != events.PhaseUnhealthy {
		d.st.Suspect = events.Suspect{} // the brake holds only Unhealthy proxies
	}
	if d.st.Phase != old || d.warningChanged() {
		dec.Events = append(dec.Events, events.Event{V: 1, Kind: events.KindPhase, Proxy: d.in.Name, At: d.now,
			Phase: d.st.Phase, From: old, Reason: d.st.Reason, Message: d.st.Message})
	}
	if ev := d.rolledOut(d.st.Phase); ev != nil {
		dec.Events = append(dec.Events, *ev)
	}
	if d.in.Status == nil || !sameStatus(*d.in.Status, *d.st) {
		d.st.UpdatedAt = d.now
	}
	dec.Status = d.st
	return dec
}

// warningChanged reports whether a warning appeared or cleared, or its message changed (the
// egress address moved again), while the phase stayed.
func (d *decider) warningChanged() bool {
	was := d.in.Status
	if was == nil || was.Phase != d.st.Phase {
		return false
	}
	if !slices.Contains(warnings, was.Reason) && !slices.Contains(warnings, d.st.Reason) {
		return false
	}
	return was.Reason != d.st.Reason || was.Message != d.st.Message
}

func (d *decider) phase() events.Phase {
	st := d.st
	switch {
	case d.in.Spec == nil && d.in.SpecErr == nil:
		return events.PhaseDeleting
	case d.bad:
		return events.PhaseInvalid
	case st.Phase == events.PhaseFailed:
		return events.PhaseFailed
	case st.Teardown != "":
		return events.PhaseReplacing
	case st.Mode == schemas.ModeExternal:
		return d.drained(d.healthPhase())
	case st.Reason == events.ReasonQuota && d.now.Before(st.RetryAt):
		return events.PhaseWaiting
	case st.InstanceID != "" && st.IP != "":
		return d.drained(d.healthPhase())
	case d.mayExist() || st.Op != nil:
		return events.PhaseProvisioning
	}
	return events.PhasePending
}

// drained is the phase of a proxy with an address whose spec says drain: Draining, whatever
// its health (which the HEALTHY column still shows), so that nobody reads it as capacity.
func (d *decider) drained(p events.Phase) events.Phase {
	if d.in.Spec != nil && d.in.Spec.Drain || d.st.Rollout != nil && d.st.Rollout.Stage == events.RolloutDraining {
		return events.PhaseDraining
	}
	return p
}

// healthPhase is the phase of a proxy that has an address: Ready or Unhealthy once the probers
// have a verdict on that very address, Running until then. A healthy proxy less anonymous than
// its spec requires is Unhealthy too (HeaderLeak, see anonymity), and one whose traffic leaves
// from another address than expected is Ready with the warning EgressMismatch.
func (d *decider) healthPhase() events.Phase {
	st := d.st
	healthy, judged := d.verdict()
	if !judged {
		d.clearHealthReason()
		return events.PhaseRunning
	}
	if healthy {
		switch msg, ok, pending := d.anonymity(); {
		case pending:
			d.clearHealthReason()
			return events.PhaseRunning
		case !ok:
			if d.overridable() {
				st.Reason, st.Message = events.ReasonHeaderLeak, msg
			}
			return events.PhaseUnhealthy
		}
		if st.ReadyAt.IsZero() {
			st.ReadyAt = d.now
		}
		d.clearHealthReason()
		if h := d.in.Health; h.EgressMismatch() && d.overridable() {
			st.Reason, st.Message = events.ReasonEgressMismatch, fmt.Sprintf("traffic leaves from %s, expected %s", h.EgressIP, h.ExpectedEgress)
		}
		return events.PhaseReady
	}
	if st.Mode != schemas.ModeExternal || st.Reason == "" || st.Reason == events.ReasonExternalEndpoint {
		st.Reason, st.Message = events.ReasonProbeFailing, d.in.Health.LastError
	}
	return events.PhaseUnhealthy
}

func (d *decider) clearHealthReason() {
	if slices.Contains(healthReasons, d.st.Reason) {
		d.st.Reason, d.st.Message = "", ""
		if d.st.Mode == schemas.ModeExternal {
			d.st.Reason = events.ReasonExternalEndpoint
		}
	}
}

// overridable reports whether the status reason may give way to one from the probers'
// record: it has none, only the external proxy's standing one, or a health reason. Another
// (a provider error, say) explains more and is kept.
func (d *decider) overridable() bool {
	r := d.st.Reason
	return r == "" || r == events.ReasonExternalEndpoint || slices.Contains(healthReasons, r)
}

// anonymity checks a healthy proxy's verdict against its spec's healthCheck.requireAnonymity.
// An unknown verdict is below every requirement once the probers tried to judge it (the
// record lists paths): a path whose echo failed, or a custom check URL that is not an echo
// endpoint, cannot show that the proxy hides what it must, so the proxy is never leased
// (fail closed; the message says how to fix it). Only a record without any path (a prober
// from before anonymity was judged) is pending: Running, not leased either.
func (d *decider) anonymity() (msg string, ok, pending bool) {
	req := requiredAnonymity(d.in.Spec)
	h := d.in.Health
	a := h.AnonymityVerdict(d.st.Address(), d.st.AddressAt, 0, d.now)
	switch {
	case a.AtLeast(req):
		return "", true, false
	case !h.Echoed():
		return "", false, true
	}
	return anonymityMessage(h, req), false, false
}

// requiredAnonymity is the verdict a spec requires, "" for none.
func requiredAnonymity(s *schemas.ProxySpec) events.Anonymity {
	if s == nil || s.HealthCheck.RequireAnonymity == schemas.AnonymityNone {
		return ""
	}
	return events.Anonymity(s.HealthCheck.RequireAnonymity)
}

// anonymityMessage says why a proxy is below its requirement, naming the leaked headers (by
// name only: their values hold the client's address) or why there is no verdict.
func anonymityMessage(h *events.ProxyHealth, req events.Anonymity) string {
	if h.Anonymity != "" {
		msg := fmt.Sprintf("%s, requires %s", h.Anonymity, req)
		if len(h.LeakedHeaders) > 0 {
			msg += ": sites see " + strings.Join(h.LeakedHeaders, ", ")
		}
		return msg
	}
	var why []string
	for _, p := range h.Paths {
		switch {
		case p.Error != "":
			why = append(why, p.Path+": "+p.Error)
		case p.Anonymity == "":
			why = append(why, p.Path+": no echo reply from the check URL "+h.CheckURL+" (requireAnonymity needs egressd's echo endpoint: leave healthCheck.url empty)")
		}
	}
	msg := fmt.Sprintf("anonymity unknown, requires %s", req)
	if len(why) > 0 {
		msg += ": " + strings.Join(why, "; ")
	}
	return msg
}

// verdict is the probers' verdict on the proxy's current address, if they have one
// (events.ProxyHealth.Verdict: a predecessor's record at the same ip:port is none). Staleness
// is left to the record's TTL: Decide runs on changes, not on the clock.
func (d *decider) verdict() (healthy, judged bool) {
	return d.in.Health.Verdict(d.st.Address(), d.st.AddressAt, 0, d.now)
}
