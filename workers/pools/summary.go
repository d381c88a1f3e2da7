package pools

import (
	"fmt"

	"github.com/egressd/egressd/events"
)

// What a pass says of the pool: its phase, reason and message, from the ledger as the pass
// left it.

// summarize records the ledger with the pool's phase and reason.
func (p *planner) summarize() {
	spec := *p.in.Spec
	act, ready, draining, retiring := 0, 0, 0, events.Reason("")
	for _, m := range p.members {
		if active(m) {
			act++
			if p.ready(m.Name) {
				ready++
			}
		}
		if !m.DrainingSince.IsZero() || m.Deleting {
			draining++
		}
		if retiring == "" && m.Retire != "" {
			retiring = m.Retire
		}
	}
	phase, reason, msg := events.PoolReady, events.Reason(""), fmt.Sprintf("%d of %d members Ready", ready, *spec.Replicas)
	switch {
	case p.held != "":
		phase, reason, msg = events.PoolProgressing, events.ReasonRotationHeld, p.held
	case retiring != "" || draining > 0 || act != *spec.Replicas:
		phase, reason = events.PoolProgressing, retiring
		msg = fmt.Sprintf("%d of %d members Ready, %d draining", ready, *spec.Replicas, draining)
	case ready < act && p.limited() != "":
		phase, reason = events.PoolProgressing, events.ReasonLimitReached
		msg = fmt.Sprintf("%d of %d members Ready; %s", ready, *spec.Replicas, p.limited())
	case ready < act:
		phase = events.PoolDegraded
		for _, m := range p.members {
			switch p.in.Phase[m.Name] {
			case "", events.PhasePending, events.PhaseProvisioning, events.PhaseRunning, events.PhaseReplacing:
				phase = events.PoolProgressing
			}
		}
	}
	if h := p.heldMessage(); h != "" {
		msg += "; " + h
		// The phase stays what the members make it: a held placement is where new members go,
		// not a state of the members there are.
		if reason == "" {
			reason = events.ReasonPlacementFallback
		}
	}
	p.record(phase, reason, msg)
}

// record sets the outcome's ledger to the members with phase, reason and message.
func (p *planner) record(phase events.PoolPhase, reason events.Reason, msg string) {
	st := events.PoolStatus{V: 1, Phase: phase, Reason: reason, Message: msg, SpecRevision: p.in.SpecRev,
		Members: p.members, UpdatedAt: p.in.Now}
	if st.Members == nil {
		st.Members = []events.PoolMember{}
	}
	if p.in.Ledger != nil {
		st.Replicas, st.MaxMembers = p.in.Ledger.Replicas, p.in.Ledger.MaxMembers
	}
	if p.in.Spec != nil && p.in.SpecErr == nil {
		st.Boots, st.Boot, st.Placements = p.boots, bootStats(p.boots), p.placements()
	} else if l := p.in.Ledger; l != nil {
		st.Boots, st.Boot, st.Placements = l.Boots, l.Boot, l.Placements // an invalid or deleted pool keeps them
	}
	switch {
	case p.scaled != nil:
		st.Autoscale = p.scaled
	case p.in.SpecErr != nil && p.in.Ledger != nil:
		st.Autoscale = p.in.Ledger.Autoscale // an invalid spec changes nothing, the count included
	}
	if s := p.in.Spec; s != nil && p.in.SpecErr == nil {
		st.Replicas, st.MaxMembers = *s.Replicas, s.MaxMembers()
		for _, m := range st.Members {
			// A member already due but held (RotationHeld) counts: its time is in the past.
			if active(m) && !m.RotateAt.IsZero() && (st.NextRotation.IsZero() || m.RotateAt.Before(st.NextRotation)) {
				st.NextRotation = m.RotateAt
			}
		}
	}
	p.out.Ledger = &st
}

// limited says why members wait for their provider's instance limit: how many, and the
// first one's message (in name order), or "" when none does.
func (p *planner) limited() string {
	var first, msg string
	n := 0
	for _, m := range p.members {
		if lm, ok := p.in.Limited[m.Name]; ok && active(m) {
			n++
			if first == "" || m.Name < first {
				first, msg = m.Name, lm
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d wait for the instance limit (%s: %s)", n, first, msg)
}
