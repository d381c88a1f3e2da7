package reconciler

import (
	"fmt"

	"github.com/egressd/egressd/events"
)

// Rollouts (decision 86, docs/rollouts.md). A change that needs a new instance (the spec's
// hash: its own fields or the cloud_init document it references; credentials its provider
// cannot update in place) never replaces every proxy it touches at once:
//
//   - a pool member is only marked outdated (status.rollout, stage Waiting); its pool
//     retires it and rotates it successor first, as for a template change;
//   - a proxy of its own waits for a place in its provider's budget (maxUnavailable, 1 by
//     default), then is rolled successor first (decision 98, successor.go): Surging, a
//     successor is built beside its instance, which serves meanwhile; Retiring, the status
//     has switched to the successor and the instance it replaced serves the leases granted
//     on it until they end, then is deleted. No lease is cut, and there is no drain timeout.
//     Its place is free again once it is Ready on its new instance and nothing retires.
//
// A paused scope starts no new rollout; one already under way finishes.

// RolloutBudget is what Decide needs of the rollout scope of a proxy of its own.
type RolloutBudget struct {
	// MaxUnavailable is the places of the scope's budget (the provider's maxUnavailable).
	MaxUnavailable int
	// Active is how many of the scope's other proxies take a place now.
	Active int
	Paused bool
	// Instances counts the proxy's leases by the instance they were granted on
	// (events.Lease.Instance, an Incarnation), read fresh while it has retiring instances;
	// nil: not read (nothing retiring, or the read failed).
	Instances map[string]int
}

// leasesOn is how many leases were granted on r, -1 when they were not counted.
func (b RolloutBudget) leasesOn(r events.InstanceRef) int {
	if b.Instances == nil {
		return -1
	}
	return b.Instances[r.Incarnation()]
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
// current). It only moves the stage; the ops of a proxy rolled successor first are taken by
// rollStep, after the ops in flight and the teardowns.
func (d *decider) roll(why events.Reason) {
	st, r := d.st, d.st.Rollout
	if why == "" {
		d.current(r)
		return
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
			return
		}
		d.setRolloutReason(events.ReasonRolloutWaiting, fmt.Sprintf("its instance is outdated (%s); pool %s replaces it, successor first", why, pool))
		return
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
			return
		case b.Active >= max(b.MaxUnavailable, 1):
			r.Stage = events.RolloutWaiting
			d.setRolloutReason(events.ReasonRolloutWaiting, fmt.Sprintf("its instance is outdated (%s); %d of %s's %d rollout places are taken (maxUnavailable)",
				why, b.Active, r.Scope, max(b.MaxUnavailable, 1)))
			d.wakeAt(d.now.Add(d.p.RolloutPoll))
			return
		}
		r.StartedAt = d.now
	}
	// Draining (a status of a release before decision 98) and Retiring (the spec changed
	// again after the switch) keep their place and surge (anew).
	r.Stage = events.RolloutSurging
}

// current ends the rollout of a proxy whose instance follows the spec, or stands for none
// (gone, or being torn down): a rollout not started ends; a successor being built is no
// longer wanted and retires, and the stage stays Retiring while anything retires.
func (d *decider) current(r *events.Rollout) {
	switch {
	case r == nil || r.Stage == events.RolloutReplacing:
	case r.Stage == events.RolloutSurging || r.Stage == events.RolloutRetiring:
		d.retireSuccessor()
		c := *r
		c.Stage, d.st.Rollout = events.RolloutRetiring, &c
	default:
		d.st.Rollout = nil // the change was undone before its turn: nothing to replace
		d.clearRolloutReason()
	}
}

// rolloutReasons are the reasons roll sets on a proxy that keeps running.
var rolloutReasons = []events.Reason{events.ReasonRolloutWaiting, events.ReasonRolloutPaused, events.ReasonRolloutDraining,
	events.ReasonRolloutSurging, events.ReasonRolloutRetiring}

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

// rolledOut ends a rollout whose new instance is Ready, and nothing of the proxy's retires
// any more: its place is free, and an event says so.
func (d *decider) rolledOut(phase events.Phase) *events.Event {
	st, r := d.st, d.st.Rollout
	if r == nil || phase != events.PhaseReady {
		return nil
	}
	switch {
	case r.Stage == events.RolloutReplacing:
	case r.Stage == events.RolloutRetiring && st.Successor == nil && len(st.Retiring) == 0:
		if r.SwitchedAt.IsZero() {
			// The change was undone before the switch: its successor is gone, nothing was
			// replaced.
			st.Rollout = nil
			d.clearRolloutReason()
			return nil
		}
	default:
		return nil
	}
	st.Rollout = nil
	d.clearRolloutReason()
	return &events.Event{V: 1, Kind: events.KindPhase, Proxy: d.in.Name, At: d.now, Phase: phase, From: phase,
		Reason: events.ReasonRolloutReplaced, Message: fmt.Sprintf("Ready on a new instance %s (%s; %s)",
			st.InstanceName, r.Reason, r.Scope)}
}
