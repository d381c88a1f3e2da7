package pools

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Autoscale (issue 23 item 3, docs/pools.md#autoscale): the member count follows the demand
// the leasers measure. The decision is pure (scaleDecide) and its state lives in the pool's
// record, so that a controller taking over carries on where the last one stopped.

// scaleIn is what one autoscale decision looks at.
type scaleIn struct {
	Spec      schemas.Autoscale // defaults applied
	MaxLeases int               // the template's: the slots one member serves
	// Current is the member count decided last (the record's), or, at the first decision
	// (a new pool, or one switched from replicas), the serving members now.
	Current  int
	Members  int // serving members: not draining, not superseded
	Ready    int // of those, Ready
	Idle     int // of those, holding no lease
	Held     int // lease slots held on them
	Demand   events.DemandSum
	Boot     *events.BootStats // the pool's last boots, for spares "auto"
	LowSince time.Time         // from the record
	Now      time.Time
}

// scaleOut is the decision: the member count, the state to record, and, when the count
// changes, the event's words.
type scaleOut struct {
	Desired  int
	State    events.PoolAutoscale
	Changed  bool
	Reason   events.Reason
	Decision string
}

// scaleDecide sets the member count from demand. Wanted is the members that serve what is
// held, waiting and refused at targetUtilization, within min and max. Above the count, the
// count rises at once; below it, the count falls once it has been below for
// scaleDownAfterSeconds, by at most scaleDownStep and never by more than the idle members
// (a member holding a lease is never the one removed).
func scaleDecide(in scaleIn) scaleOut {
	a := in.Spec
	lo, hi := *a.Min, *a.Max
	per := max(in.MaxLeases, 1)
	// The leasers' records are up to one interval old: slots granted since (held now above
	// what the records say) answered some of their waiting or refused acquires, which must
	// not count twice, or every grant to a waiter would start a member for nothing.
	unmet := max(in.Demand.Unmet()-max(in.Held-in.Demand.Held, 0), 0)
	demand := in.Held + unmet
	need := int(math.Ceil(float64(demand) / (float64(per) * a.TargetUtilization)))
	if demand > 0 && need == 0 {
		need = 1
	}
	var spares int
	var sparesFrom string
	if !a.Spares.IsZero() {
		// Spares ride on demand: a pool with none in the window falls to min (set min for
		// members that must be there with no demand at all).
		if spares, sparesFrom = sparesFor(a, per, in.Demand.GrantsPerSecond, in.Boot); demand == 0 && in.Demand.GrantsPerSecond <= 0 {
			spares, sparesFrom = 0, "no demand in the window"
		}
		need = max(need, (demand+per-1)/per+spares)
	}
	wanted := min(max(need, lo), hi)
	cur := min(max(in.Current, lo), hi) // min or max changed since
	inputs := events.ScaleInputs{Held: in.Held, Waiting: in.Demand.Waiting, Refused: in.Demand.Refused,
		GrantsPerSecond: in.Demand.GrantsPerSecond, Members: in.Members, Ready: in.Ready, Capacity: in.Ready * per,
		Target: a.TargetUtilization, Wanted: wanted, Leasers: in.Demand.Leasers, Spares: spares, SparesFrom: sparesFrom}
	out := scaleOut{Desired: cur, State: events.PoolAutoscale{Desired: cur, Inputs: inputs}}
	after := time.Duration(a.ScaleDownAfterSeconds) * time.Second
	low := in.LowSince
	switch {
	case wanted > cur:
		out.Desired, out.Reason = wanted, events.ReasonScaledUp
	case wanted == cur:
	default:
		if low.IsZero() || low.After(in.Now) {
			low = in.Now
		}
		out.State.LowSince, out.State.NextScaleDown = low, low.Add(after)
		if in.Now.Before(out.State.NextScaleDown) {
			break
		}
		// The members above the count are drained fewest leases first: as many as are idle
		// may go, and a member not yet counted (created, not yet serving) is idle too.
		idle := in.Idle + max(cur-in.Members, 0)
		step := min(a.ScaleDownStep, cur-wanted, idle)
		if step <= 0 {
			out.State.Held = fmt.Sprintf("every member above %d holds a lease: the count goes down as leases end", wanted)
			break
		}
		out.Desired, out.Reason = cur-step, events.ReasonScaledDown
	}
	if out.Desired != in.Current {
		// A clamp counts too: a new pool rising to min, a max lowered under the count.
		out.Changed = true
		if out.Reason == "" {
			out.Reason = events.ReasonScaledUp
			if out.Desired < in.Current {
				out.Reason = events.ReasonScaledDown
			}
		}
		out.Decision = fmt.Sprintf("%d → %d: %s", in.Current, out.Desired, describeInputs(inputs))
		out.State.Desired = out.Desired
		out.State.LastDecision, out.State.LastDecisionAt = out.Decision, in.Now
		if out.Reason == events.ReasonScaledDown && out.Desired > wanted {
			// Still above what demand asks: the next step waits for nothing more.
			out.State.LowSince, out.State.NextScaleDown = low, low.Add(after)
		} else if out.Reason == events.ReasonScaledDown || out.Reason == events.ReasonScaledUp {
			out.State.LowSince, out.State.NextScaleDown = time.Time{}, time.Time{}
		}
	}
	return out
}

// describeInputs is a decision's inputs in words: "6 waiting, 2 refused, 8/8 leased, target 0.8".
func describeInputs(in events.ScaleInputs) string {
	var parts []string
	if in.Waiting > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting", in.Waiting))
	}
	if in.Refused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", in.Refused))
	}
	parts = append(parts, fmt.Sprintf("%d/%d leased", in.Held, in.Capacity), fmt.Sprintf("target %g", in.Target))
	if in.Spares > 0 {
		parts = append(parts, fmt.Sprintf("%d spares (%s)", in.Spares, in.SparesFrom))
	}
	return strings.Join(parts, ", ")
}

// autoscale decides the member count of a pool with autoscale and plans the rest of the pass
// with it as replicas: from here on the pool is planned as one of that many replicas, so a
// change of the count creates or drains members as a change of replicas does, successor-first
// rotation and drains included.
func (p *planner) autoscale() {
	spec := *p.in.Spec
	if spec.Autoscale == nil {
		return
	}
	in := scaleIn{Spec: *spec.Autoscale, MaxLeases: 1, Demand: p.in.Demand, Now: p.in.Now, Boot: bootStats(p.boots)}
	if spec.Template.MaxLeases != nil {
		in.MaxLeases = *spec.Template.MaxLeases
	}
	for _, m := range p.members {
		if !active(m) {
			continue
		}
		in.Members++
		n := p.in.Leases[m.Name]
		in.Held += n
		if n == 0 {
			in.Idle++
		}
		if p.ready(m.Name) {
			in.Ready++
		}
	}
	in.Current = in.Members // the first decision, or the first after replicas: keep the members
	if l := p.in.Ledger; l != nil && l.Autoscale != nil {
		in.Current, in.LowSince = l.Autoscale.Desired, l.Autoscale.LowSince
		in.Current = max(in.Current, 0)
	}
	out := scaleDecide(in)
	if prev := p.in.Ledger; prev != nil && prev.Autoscale != nil && !out.Changed {
		out.State.LastDecision, out.State.LastDecisionAt = prev.Autoscale.LastDecision, prev.Autoscale.LastDecisionAt
	}
	p.scaled = &out.State
	if out.Changed {
		p.out.Events = append(p.out.Events, events.Event{Kind: events.KindPool, Proxy: p.in.Name, At: p.in.Now, Reason: out.Reason,
			Message: "autoscale " + out.Decision, Pool: &events.PoolEvent{Pool: p.in.Name,
				Scale: &events.PoolScale{From: in.Current, To: out.Desired, Inputs: out.State.Inputs}}})
	}
	desired := out.Desired
	spec.Replicas = &desired
	r := spec.Rotation
	avail := desired
	if *r.MaxSurge == 0 {
		avail = max(desired-1, 0)
	}
	if r.MinAvailable != nil {
		avail = min(avail, *r.MinAvailable)
	}
	r.MinAvailable = &avail
	spec.Rotation = r
	p.in.Spec = &spec
}
