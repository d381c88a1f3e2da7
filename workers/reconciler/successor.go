package reconciler

import (
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/workers"
)

// A proxy of its own rolled successor first (decision 98): the steps on the instances its
// status lists besides its own, its successor and its retiring predecessors. Each is recorded
// before its create is sent and until a delete confirms it gone; an op on one of them names
// it (OpRef.Instance), so a new leader rebuilds it and its result folds into its record.
//
// The switch happens when the successor is Running with an address: the probers have no
// verdict on it yet, so the proxy is Running (not leased) on its new address until its first
// probes pass there (trap 8 of the decision: the probe before the switch is not built).

// retireSettle: a retiring instance's leases are counted only this long after the switch,
// so that a grant racing the leasers' view of the status is counted.
const retireSettle = 3 * time.Second

// hasExtras reports whether the status lists instances besides its own.
func (d *decider) hasExtras() bool {
	return d.st != nil && (d.st.Successor != nil || len(d.st.Retiring) > 0)
}

// extraNames are the names of the proxy's successor and retiring instances.
func (d *decider) extraNames() []string {
	var names []string
	if d.st.Successor != nil {
		names = append(names, d.st.Successor.Name)
	}
	for _, r := range d.st.Retiring {
		names = append(names, r.Name)
	}
	return names
}

// rollStep takes the next step on the proxy's other instances, and reports whether it sent
// an op (one at a time: the proxy's own instance then waits for its result).
func (d *decider) rollStep(hash, auth string) bool {
	if d.retireStep() {
		return true
	}
	return d.surgeStep(hash, auth)
}

// retireStep deletes, by name, a retiring instance no lease was granted on or whose leases
// all ended. There is no timeout: a lease ends by release or by its TTL.
func (d *decider) retireStep() bool {
	st := d.st
	held, counting := 0, false
	for _, r := range st.Retiring {
		settled := r.RetiredAt.Add(retireSettle)
		if d.now.Before(settled) {
			d.wakeAt(settled)
			counting = true
			continue
		}
		switch n := d.in.Rollout.leasesOn(r); {
		case n == 0:
			d.issueOn(events.OpDelete, r.Name, r.Host)
			return true
		case n < 0:
			counting = true
		default:
			held += n
		}
		d.wakeAt(d.now.Add(d.p.RolloutPoll))
	}
	switch {
	case len(st.Retiring) > 0:
		what := fmt.Sprintf("%d leases run on", held)
		if counting {
			what = "its leases are counted"
		}
		d.setRolloutReason(events.ReasonRolloutRetiring, fmt.Sprintf("on its new instance %s; the instance it replaced, %s, serves the leases granted on it until they end (%s)",
			st.InstanceName, st.Retiring[0].Name, what))
	case st.Rollout != nil && st.Rollout.Stage == events.RolloutRetiring:
		d.clearRolloutReason()
	}
	return false
}

// surgeStep builds the successor of a proxy whose rollout is Surging: records it, sends its
// create, and reads it until it runs (the switch is in foldExtra). A successor no longer
// wanted, or outdated before its switch (the spec changed again), retires.
func (d *decider) surgeStep(hash, auth string) bool {
	st, r := d.st, d.st.Rollout
	surging := r != nil && r.Stage == events.RolloutSurging
	if s := st.Successor; s != nil && (!surging || s.SpecHash != hash || s.AuthHash != auth) {
		d.retireSuccessor()
		return d.retireStep()
	}
	if !surging {
		return false
	}
	s := st.Successor
	if s == nil {
		if d.in.CreateAt.After(d.now) {
			d.wakeAt(d.in.CreateAt) // the provider's create-rate limit: the proxy serves on
			return false
		}
		if d.successorLimited() {
			return false
		}
		gen := d.in.NewID()
		st.Successor = &events.InstanceRef{Name: providers.SuccessorName(d.in.Installation, st.UID, gen), Host: st.Host,
			Generation: gen, ProvisionAt: d.now, SpecHash: hash, AuthHash: auth, AuthRevision: d.in.SpecRevision}
		d.setRolloutReason(events.ReasonRolloutSurging, fmt.Sprintf("its instance is outdated (%s); its successor %s is being built beside it",
			r.Reason, st.Successor.Name))
		d.issueOn(events.OpCreate, st.Successor.Name, st.Host)
		return true
	}
	deadline := s.ProvisionAt.Add(d.p.ProvisionDeadline)
	switch {
	case !d.now.Before(deadline):
		// Never Running with an address: it goes, and the next decision surges anew.
		st.LastError = &events.LastError{Class: events.ClassTransient, At: d.now,
			Message: fmt.Sprintf("successor %s had no address %s after its create; retiring it", s.Name, d.p.ProvisionDeadline)}
		d.retireSuccessor()
		return d.retireStep()
	case s.NextPollAt.IsZero():
		// Its create got no result (the op timed out, or a new leader lost it): sent again,
		// it makes or adopts the same instance by name.
		d.issueOn(events.OpCreate, s.Name, s.Host)
	case !d.now.Before(s.NextPollAt):
		d.issueOn(events.OpGet, s.Name, s.Host)
	default:
		d.wakeAt(s.NextPollAt)
		d.wakeAt(deadline)
		return false
	}
	return true
}

// successorLimited keeps a successor from passing its provider's instance limits: it is
// one more instance (the tally counts the proxy's own already). The proxy serves on.
func (d *decider) successorLimited() bool {
	lim := d.in.Limit
	if lim == nil {
		return false
	}
	full := lim.GlobalMax > 0 && lim.GlobalCount >= lim.GlobalMax || lim.Max > 0 && lim.Count >= lim.Max ||
		lim.PerTarget > 0 && lim.TargetCount[d.st.Host] >= lim.PerTarget
	if full {
		d.setRolloutReason(events.ReasonRolloutSurging, "its instance is outdated; its successor waits for room under the instance limits")
		d.wakeAt(d.now.Add(d.p.DriftPoll))
	}
	return full
}

// retireSuccessor moves the successor, if any, to retiring: it is deleted by name (trap 3:
// with or without its ID) once no lease was granted on it, which none was before a switch.
func (d *decider) retireSuccessor() {
	st := d.st
	if st.Successor == nil {
		return
	}
	s := *st.Successor
	s.RetiredAt, s.NextPollAt = d.now, time.Time{}
	st.Retiring, st.Successor = append(st.Retiring, s), nil
}

// switchTo makes the successor the instance the status describes, Running at inst's
// address, and retires the instance it replaces.
func (d *decider) switchTo(inst *events.Instance) {
	st, s := d.st, *d.st.Successor
	old := events.InstanceRef{Name: st.InstanceName, ID: st.InstanceID, Host: st.Host, Generation: st.Generation,
		ProvisionAt: st.ProvisionAt, SpecHash: st.SpecHash, AuthHash: st.AuthHash, AuthRevision: st.AuthRevision, RetiredAt: d.now}
	if st.MayExist() {
		st.Retiring = append(st.Retiring, old)
	}
	st.Successor = nil
	st.InstanceName, st.InstanceID, st.Host, st.Generation, st.ProvisionAt = s.Name, inst.ID, s.Host, s.Generation, s.ProvisionAt
	st.SpecHash, st.AuthHash, st.AuthRevision = s.SpecHash, s.AuthHash, s.AuthRevision
	st.ExpiresAt, st.ExpectedEgress = inst.ExpiresAt, inst.EgressIP
	d.setAddress(inst.Address, inst.Port)
	st.AddrMisses, st.Deadlines, st.NextPollAt = 0, 0, d.now.Add(d.p.DriftPoll)
	if r := st.Rollout; r != nil {
		c := *r
		c.Stage, c.SwitchedAt, st.Rollout = events.RolloutRetiring, d.now, &c
	}
}

// foldExtra folds the result of an op on the successor or a retiring instance. Nothing of
// it latches the proxy Failed or Waiting: its own instance serves on.
func (d *decider) foldExtra(r *events.OpResult, name string) {
	st := d.st
	if r.Error != "" {
		st.LastError = &events.LastError{Class: r.ErrorClass, Message: name + ": " + r.Error, At: r.At}
	}
	if !r.Final {
		st.Op.Attempts = r.Attempt
		return
	}
	st.Op = nil
	if i := slices.IndexFunc(st.Retiring, func(x events.InstanceRef) bool { return x.Name == name }); i >= 0 {
		d.foldRetiring(r, i)
		return
	}
	s := st.Successor
	if s == nil || s.Name != name {
		return // its record is gone (retired meanwhile): the next decision acts anew
	}
	switch {
	case r.ErrorClass == events.ClassNone && r.Instance != nil:
		st.LastError, st.Failures = nil, 0
		s.ID = r.Instance.ID
		switch providers.State(r.Instance.State) {
		case providers.StateRunning:
			if r.Instance.Address != "" {
				d.switchTo(r.Instance)
				return
			}
			s.NextPollAt = d.now.Add(d.p.ProvisioningPoll)
		case providers.StateProvisioning:
			s.NextPollAt = d.now.Add(d.p.addrPoll(d.now.Sub(s.ProvisionAt)))
		default: // Stopped, Terminated: it will not serve
			d.retireSuccessor()
		}
	case r.ErrorClass == events.ClassNotFound && r.Kind == events.OpGet:
		st.Successor = nil // nothing to delete; the next decision surges anew
	case r.ErrorClass == events.ClassStale, r.ErrorClass == events.ClassPermanent, r.ErrorClass == events.ClassQuota:
		// Outdated before it was made, or it cannot be made now: it goes (by name, whatever
		// an attempt made), and a new one is surged after the wait.
		d.retireSuccessor()
		d.extraBackoff(r.ErrorClass == events.ClassQuota)
	case r.ErrorClass != events.ClassNone:
		d.extraBackoff(false)
	}
}

// foldRetiring folds the result of the delete of retiring instance i.
func (d *decider) foldRetiring(r *events.OpResult, i int) {
	st := d.st
	switch {
	case r.Kind != events.OpDelete:
	case r.ErrorClass == events.ClassNone && r.Instance != nil:
		st.LastError = nil
		st.RetryAt = d.now.Add(d.p.DeletionPoll) // still going away; delete again then
	case r.ErrorClass == events.ClassNone || r.ErrorClass == events.ClassNotFound:
		st.LastError, st.Failures = nil, 0
		st.Retiring = slices.Delete(st.Retiring, i, i+1)
	default:
		d.extraBackoff(false) // deletion is never latched
	}
}

// extraBackoff waits before the next op after a failed one on another instance, without
// the reason of the proxy's own (it serves on; LastError says what failed).
func (d *decider) extraBackoff(quota bool) {
	d.st.Failures++
	wait := workers.Backoff(d.st.Failures, d.p.BackoffBase, d.p.BackoffMax)
	if quota {
		wait = d.p.QuotaRetry
	}
	d.st.RetryAt = d.now.Add(wait)
}

// deleteExtra, when the proxy leaves its provider (deleted, moved, made external), deletes
// its successor and then its retiring instances, before its own and while the status still
// names the provider they are on (trap 7). It reports whether it sent a delete.
func (d *decider) deleteExtra() bool {
	st := d.st
	switch st.Teardown {
	case events.ReasonProxyDeleted, events.ReasonProviderChanged, events.ReasonModeChanged:
	default:
		return false
	}
	d.retireSuccessor()
	if len(st.Retiring) == 0 {
		return false
	}
	d.issueOn(events.OpDelete, st.Retiring[0].Name, st.Retiring[0].Host)
	return true
}

// issueOn sends an op on the successor or a retiring instance, named on the op reference.
func (d *decider) issueOn(kind events.OpKind, name, host string) {
	d.st.Op = &events.OpRef{Kind: kind, ID: d.in.NewID(), Host: host, IssuedAt: d.now, Instance: name}
	d.ops = append(d.ops, OpFor(d.in.Name, *d.st))
	d.wakeAt(d.now.Add(d.p.OpTimeout))
}

// opOnExtra fills op, an op on another instance than the status's own, from its record.
func opOnExtra(op *events.Op, st events.ProxyStatus) {
	op.InstanceName, op.InstanceID = st.Op.Instance, ""
	refs := st.Retiring
	if st.Successor != nil {
		refs = append([]events.InstanceRef{*st.Successor}, refs...)
	}
	for _, r := range refs {
		if r.Name != st.Op.Instance {
			continue
		}
		op.InstanceID = r.ID
		if op.Kind == events.OpCreate {
			op.SpecHash, op.Generation = r.SpecHash, r.Generation
		}
		return
	}
}
