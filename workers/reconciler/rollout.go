package reconciler

import (
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
)

// Rollouts (decision 86, docs/rollouts.md). A change that needs a new instance (the spec's
// hash: its own fields or the cloud_init document it references; credentials its provider
// cannot update in place) never replaces every proxy it touches at once:
//
//   - a pool member is only marked outdated (status.rollout, stage Waiting); its pool
//     retires it and rotates it successor first, as for a template change;
//   - a proxy of its own waits for a place in its provider's budget (maxUnavailable, 1 by
//     default), then drains (phase Draining: no new lease, the held ones run on) until its
//     leases are gone or the drain timeout passes, then is replaced; its place is free
//     again once it is Ready on its new instance.
//
// A paused scope starts no new drain; one already draining or replacing finishes.

// RolloutBudget is what Decide needs of the rollout scope of a proxy of its own.
type RolloutBudget struct {
	// MaxUnavailable is the places of the scope's budget (the provider's maxUnavailable).
	MaxUnavailable int
	// Active is how many of the scope's other proxies take a place now (draining or being
	// replaced).
	Active int
	Paused bool
	// Leases is how many leases the proxy holds, read fresh while it drains; -1: unknown.
	Leases int
}

// DefaultMaxUnavailable is a provider's rollout budget when its config sets none.
const DefaultMaxUnavailable = 1

// outdated is why the instance that exists must be replaced to follow the spec, "" when it
// follows it. A change of provider or of mode is not a rollout: the instance is deleted at
// once, as the user moved the proxy.
func (d *decider) outdated(hash, auth string, inPlace bool) events.Reason {
	st := d.st
	switch {
	case !d.mayExist() || st.Teardown != "" || st.Provider != d.in.Spec.Provider:
		return ""
	case st.SpecHash != "" && st.SpecHash != hash:
		return events.ReasonSpecChanged
	case !inPlace && st.InstanceID != "" && st.AuthHash != auth:
		return events.ReasonCredentialsChanged
	}
	return ""
}

// roll takes the next step of the proxy's rollout for why ("" when its instance is
// current), and reports whether the instance is to be torn down now.
func (d *decider) roll(why events.Reason) bool {
	st, r := d.st, d.st.Rollout
	if why == "" {
		if r != nil && r.Stage != events.RolloutReplacing {
			st.Rollout = nil // the change was undone before its turn: nothing to replace
			d.clearRolloutReason()
		}
		return false
	}
	if r == nil || r.Stage == events.RolloutReplacing {
		r = &events.Rollout{Since: d.now, Stage: events.RolloutWaiting}
	} else {
		c := *r
		r = &c
	}
	st.Rollout, r.Reason = r, why
	if pool := d.in.Spec.Pool; pool != "" {
		// The pool rotates it successor first (workers/pools); it serves until then.
		r.Scope, r.Stage = events.PoolScope(pool), events.RolloutWaiting
		if d.in.Rollout.Paused {
			r.Stage = events.RolloutPaused
			d.setRolloutReason(events.ReasonRolloutPaused, fmt.Sprintf("its instance is outdated (%s); the rollout of pool %s is paused", why, pool))
			d.wakeAt(d.now.Add(d.p.RolloutPoll))
			return false
		}
		d.setRolloutReason(events.ReasonRolloutWaiting, fmt.Sprintf("its instance is outdated (%s); pool %s replaces it, successor first", why, pool))
		return false
	}
	r.Scope = events.ProviderScope(d.in.Spec.Provider)
	b := d.in.Rollout
	switch r.Stage {
	case events.RolloutWaiting, events.RolloutPaused:
		switch {
		case b.Paused:
			r.Stage = events.RolloutPaused
			d.setRolloutReason(events.ReasonRolloutPaused, fmt.Sprintf("its instance is outdated (%s); the rollout of %s is paused", why, r.Scope))
			d.wakeAt(d.now.Add(d.p.RolloutPoll))
			return false
		case b.Active >= max(b.MaxUnavailable, 1):
			r.Stage = events.RolloutWaiting
			d.setRolloutReason(events.ReasonRolloutWaiting, fmt.Sprintf("its instance is outdated (%s); %d of %s's %d rollout places are taken (maxUnavailable)",
				why, b.Active, r.Scope, max(b.MaxUnavailable, 1)))
			d.wakeAt(d.now.Add(d.p.RolloutPoll))
			return false
		}
		r.Stage, r.StartedAt = events.RolloutDraining, d.now
		fallthrough
	case events.RolloutDraining:
		if d.draining(r, b.Leases) {
			return false
		}
		r.Stage = events.RolloutReplacing
	}
	return true
}

// draining reports whether the proxy still drains: leases held (or not yet counted), the
// settle not passed, and the drain timeout not reached.
func (d *decider) draining(r *events.Rollout, leases int) bool {
	timeout := r.StartedAt.Add(d.p.RolloutDrainTimeout)
	settled := !d.now.Before(r.StartedAt.Add(rolloutDrainSettle))
	if !d.now.Before(timeout) {
		return false
	}
	if settled && leases == 0 {
		return false
	}
	held := "its leases are counted"
	if leases > 0 {
		held = fmt.Sprintf("%d leases run on", leases)
	}
	d.setRolloutReason(events.ReasonRolloutDraining, fmt.Sprintf("its instance is outdated (%s): draining before it is replaced; %s (drain timeout %s)",
		r.Reason, held, timeout.UTC().Format(time.RFC3339)))
	d.wakeAt(d.now.Add(d.p.RolloutPoll))
	d.wakeAt(timeout)
	return true
}

// rolloutDrainSettle: a draining proxy's leases are counted only this long after it started
// draining, so that a grant racing the leasers' view of the phase is counted.
const rolloutDrainSettle = 3 * time.Second

// rolloutReasons are the reasons roll sets on a proxy that keeps running.
var rolloutReasons = []events.Reason{events.ReasonRolloutWaiting, events.ReasonRolloutPaused, events.ReasonRolloutDraining}

func (d *decider) setRolloutReason(reason events.Reason, msg string) {
	if d.st.LastError == nil {
		d.st.Reason, d.st.Message = reason, msg
	}
}

func (d *decider) clearRolloutReason() {
	for _, r := range rolloutReasons {
		if d.st.Reason == r {
			d.st.Reason, d.st.Message = "", ""
		}
	}
}

// rolledOut ends a rollout whose new instance is Ready: its place is free, and an event
// says so.
func (d *decider) rolledOut(phase events.Phase) *events.Event {
	r := d.st.Rollout
	if r == nil || r.Stage != events.RolloutReplacing || phase != events.PhaseReady {
		return nil
	}
	d.st.Rollout = nil
	return &events.Event{V: 1, Kind: events.KindPhase, Proxy: d.in.Name, At: d.now, Phase: phase, From: phase,
		Reason: events.ReasonRolloutReplaced, Message: fmt.Sprintf("Ready on a new instance %s (%s; %s)",
			d.st.InstanceName, r.Reason, r.Scope)}
}
