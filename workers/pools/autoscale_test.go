package pools

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

func autoscaleSpec(min, max, after, step int, target float64) schemas.Autoscale {
	return schemas.Autoscale{Min: &min, Max: &max, ScaleDownAfterSeconds: after, ScaleDownStep: step, TargetUtilization: target}
}

// The scale decision alone: up at once, down only after the delay, by the step, only idle.
func TestScaleDecide(t *testing.T) {
	def := autoscaleSpec(0, 5, 60, 1, 0.8)
	low := t0.Add(-30 * time.Second)
	due := t0.Add(-61 * time.Second)
	for _, tc := range []struct {
		name string
		in   scaleIn
		want int
		// lowSince and nextDown: the state recorded; reason the event's, "" for none.
		lowSince, nextDown time.Time
		reason             events.Reason
		words              string // in the decision, when there is one
		held               bool   // a scale-down waits for leases to end
	}{
		{name: "idle at zero stays", in: scaleIn{Spec: def, MaxLeases: 1}, want: 0},
		{name: "a refusal at zero scales up", in: scaleIn{Spec: def, MaxLeases: 1, Demand: events.DemandSum{Refused: 1}},
			want: 2, reason: events.ReasonScaledUp, words: "0 → 2: 1 refused, 0/0 leased, target 0.8"},
		{name: "a waiter at zero scales up, target 1", in: scaleIn{Spec: autoscaleSpec(0, 3, 60, 1, 1), MaxLeases: 1, Demand: events.DemandSum{Waiting: 1}},
			want: 1, reason: events.ReasonScaledUp, words: "0 → 1: 1 waiting"},
		{name: "the example of the issue", in: scaleIn{Spec: autoscaleSpec(0, 10, 60, 1, 0.8), MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Held: 3,
			Demand: events.DemandSum{Held: 3, Waiting: 1}}, want: 5, reason: events.ReasonScaledUp, words: "3 → 5: 1 waiting, 3/3 leased, target 0.8"},
		{name: "a waiter granted since the leasers' record counts once", in: scaleIn{Spec: autoscaleSpec(0, 5, 60, 1, 1), MaxLeases: 1, Current: 1, Members: 1,
			Ready: 1, Held: 1, Demand: events.DemandSum{Waiting: 1}}, want: 1},
		{name: "grants since the record answer only as many", in: scaleIn{Spec: autoscaleSpec(0, 9, 60, 1, 1), MaxLeases: 1, Current: 2, Members: 2,
			Ready: 2, Held: 2, Demand: events.DemandSum{Held: 1, Waiting: 2, Refused: 1}}, want: 4, reason: events.ReasonScaledUp},
		{name: "leases ended since the record take nothing off", in: scaleIn{Spec: autoscaleSpec(0, 9, 60, 1, 1), MaxLeases: 1, Current: 2, Members: 2,
			Ready: 2, Held: 1, Demand: events.DemandSum{Held: 2, Waiting: 2}}, want: 3, reason: events.ReasonScaledUp},
		{name: "utilization past the target scales up", in: scaleIn{Spec: def, MaxLeases: 4, Current: 2, Members: 2, Ready: 2, Held: 7},
			want: 3, reason: events.ReasonScaledUp, words: "7/8 leased"},
		{name: "utilization at the target holds", in: scaleIn{Spec: def, MaxLeases: 5, Current: 2, Members: 2, Ready: 2, Held: 8}, want: 2},
		{name: "never above max", in: scaleIn{Spec: def, MaxLeases: 1, Current: 4, Members: 4, Ready: 4, Held: 4, Demand: events.DemandSum{Waiting: 40}},
			want: 5, reason: events.ReasonScaledUp},
		{name: "at max stays", in: scaleIn{Spec: def, MaxLeases: 1, Current: 5, Members: 5, Ready: 5, Held: 5, Demand: events.DemandSum{Refused: 9}}, want: 5},
		{name: "never below min", in: scaleIn{Spec: autoscaleSpec(2, 5, 60, 3, 0.8), MaxLeases: 1, Current: 4, Members: 4, Ready: 4, Idle: 4, LowSince: due, Now: t0},
			want: 2, reason: events.ReasonScaledDown, words: "4 → 2"},
		{name: "a new pool starts at min", in: scaleIn{Spec: autoscaleSpec(2, 5, 60, 1, 0.8), MaxLeases: 1}, want: 2, reason: events.ReasonScaledUp},
		{name: "low demand starts the clock", in: scaleIn{Spec: def, MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Idle: 3, Now: t0},
			want: 3, lowSince: t0, nextDown: t0.Add(time.Minute)},
		{name: "low demand, not long enough", in: scaleIn{Spec: def, MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Idle: 3, LowSince: low, Now: t0},
			want: 3, lowSince: low, nextDown: low.Add(time.Minute)},
		{name: "low long enough: one step", in: scaleIn{Spec: def, MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Idle: 3, LowSince: due, Now: t0},
			want: 2, lowSince: due, nextDown: due.Add(time.Minute), reason: events.ReasonScaledDown, words: "3 → 2: 0/3 leased"},
		{name: "the last step clears the clock", in: scaleIn{Spec: def, MaxLeases: 1, Current: 1, Members: 1, Ready: 1, Idle: 1, LowSince: due, Now: t0},
			want: 0, reason: events.ReasonScaledDown, words: "1 → 0"},
		{name: "a bigger step", in: scaleIn{Spec: autoscaleSpec(0, 9, 60, 4, 0.8), MaxLeases: 1, Current: 9, Members: 9, Ready: 9, Idle: 9, Held: 0, LowSince: due, Now: t0},
			want: 5, lowSince: due, nextDown: due.Add(time.Minute), reason: events.ReasonScaledDown},
		{name: "only idle members go", in: scaleIn{Spec: autoscaleSpec(0, 9, 60, 4, 1), MaxLeases: 1, Current: 4, Members: 4, Ready: 4, Idle: 1, Held: 3, LowSince: due, Now: t0},
			want: 3, reason: events.ReasonScaledDown, words: "4 → 3: 3/4 leased, target 1"},
		{name: "every member leased: the scale-down waits", in: scaleIn{Spec: def, MaxLeases: 2, Current: 3, Members: 3, Ready: 3, Idle: 0, Held: 3, LowSince: due, Now: t0},
			want: 3, lowSince: due, nextDown: due.Add(time.Minute), held: true},
		{name: "demand back up stops the clock", in: scaleIn{Spec: def, MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Held: 3, LowSince: low, Now: t0},
			want: 4, reason: events.ReasonScaledUp},
		{name: "demand equal stops the clock", in: scaleIn{Spec: autoscaleSpec(0, 5, 60, 1, 1), MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Held: 3, LowSince: low, Now: t0},
			want: 3},
		{name: "max lowered under the count", in: scaleIn{Spec: autoscaleSpec(0, 2, 60, 1, 0.8), MaxLeases: 1, Current: 5, Members: 5, Ready: 5, Held: 5, Now: t0}, want: 2,
			reason: events.ReasonScaledDown, words: "5 → 2"},
		{name: "maxLeases 0 counts as one slot", in: scaleIn{Spec: def, MaxLeases: 0, Demand: events.DemandSum{Refused: 2}}, want: 3, reason: events.ReasonScaledUp},
		{name: "members not yet serving are idle", in: scaleIn{Spec: autoscaleSpec(0, 5, 60, 1, 1), MaxLeases: 1, Current: 3, Members: 1, Idle: 0, Held: 1, LowSince: due, Now: t0},
			want: 2, lowSince: due, nextDown: due.Add(time.Minute), reason: events.ReasonScaledDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := scaleDecide(tc.in)
			if out.Desired != tc.want || out.State.Desired != tc.want {
				t.Fatalf("desired %d (state %d), want %d: %+v", out.Desired, out.State.Desired, tc.want, out)
			}
			if out.Reason != tc.reason || out.Changed != (tc.reason != "") {
				t.Fatalf("reason %q changed %v, want %q", out.Reason, out.Changed, tc.reason)
			}
			if !strings.Contains(out.Decision, tc.words) || (out.Changed && out.State.LastDecision != out.Decision) {
				t.Fatalf("decision %q, want it to say %q", out.Decision, tc.words)
			}
			if tc.reason != events.ReasonScaledDown || tc.want > *tc.in.Spec.Min {
				if !out.State.LowSince.Equal(tc.lowSince) || !out.State.NextScaleDown.Equal(tc.nextDown) {
					t.Fatalf("low since %v next down %v, want %v %v", out.State.LowSince, out.State.NextScaleDown, tc.lowSince, tc.nextDown)
				}
			}
			if (out.State.Held != "") != tc.held {
				t.Fatalf("held %q, want %v", out.State.Held, tc.held)
			}
			if out.Desired > *tc.in.Spec.Max || out.Desired < *tc.in.Spec.Min {
				t.Fatalf("desired %d outside [%d, %d]", out.Desired, *tc.in.Spec.Min, *tc.in.Spec.Max)
			}
		})
	}
}

// The planner with autoscale: members follow the decision, the state rides in the record (a
// new controller carries on from it), a scale-down drains only idle members, an event carries
// the inputs, and switching between replicas and autoscale keeps the members.
func TestPlanAutoscale(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local","maxLeases":1},"autoscale":{"min":0,"max":3,"scaleDownAfterSeconds":60,"targetUtilization":1}}`)
	demand := events.DemandSum{}
	pass := func() outcome { return w.stepWith(demand) }
	out := pass()
	if n := len(w.owned); n != 0 || out.Ledger.Autoscale == nil || out.Ledger.Replicas != 0 {
		t.Fatalf("idle pool: %d members, record %+v", n, out.Ledger)
	}
	demand = events.DemandSum{Refused: 1, Leasers: 1}
	out = pass()
	if len(w.owned) != 1 || out.Ledger.Replicas != 1 || out.Ledger.Autoscale.Desired != 1 {
		t.Fatalf("after a refusal: %d members, record %+v", len(w.owned), out.Ledger)
	}
	if ev := findEvent(out.Events, events.ReasonScaledUp); ev == nil || ev.Pool.Scale == nil || ev.Pool.Scale.From != 0 || ev.Pool.Scale.To != 1 ||
		ev.Pool.Scale.Inputs.Refused != 1 || !strings.Contains(ev.Message, "0 → 1: 1 refused, 0/0 leased, target 1") {
		t.Fatalf("scale-up event: %+v", out.Events)
	}
	// Demand of 3 concurrent leases: at most max.
	demand = events.DemandSum{Waiting: 5}
	pass()
	if len(w.owned) != 3 {
		t.Fatalf("past max: %d members", len(w.owned))
	}
	// Demand gone, one member leased: the clock starts, and nothing goes before it runs out,
	// whichever controller makes the pass (the state is in the record).
	demand = events.DemandSum{}
	names := sortedKeys(w.owned)
	w.leases[names[0]] = 1
	out = pass()
	if out.Ledger.Autoscale.LowSince.IsZero() || !out.Ledger.Autoscale.NextScaleDown.Equal(t0.Add(time.Minute)) || len(w.owned) != 3 {
		t.Fatalf("low demand: %+v, %d members", out.Ledger.Autoscale, len(w.owned))
	}
	w.now = t0.Add(59 * time.Second)
	pass()
	if countDraining(w.ledger) != 0 {
		t.Fatalf("drained before scaleDownAfterSeconds: %+v", w.ledger.Members)
	}
	// Past the delay: one idle member a pass, never the leased one, down to the one leased.
	for i := range 4 {
		w.now = t0.Add(time.Duration(61+i) * time.Second)
		pass()
	}
	for _, m := range w.ledger.Members {
		if m.Name == names[0] && (!m.DrainingSince.IsZero() || m.Deleting) {
			t.Fatalf("the leased member was drained: %+v", w.ledger.Members)
		}
	}
	if got := w.ledger.Autoscale.Desired; got != 1 || w.ledger.Autoscale.Inputs.Members != 1 {
		t.Fatalf("down to the leased member: desired %d, state %+v", got, w.ledger.Autoscale)
	}
	// Its lease ends: down to zero once scaleDownAfterSeconds passed again.
	delete(w.leases, names[0])
	for _, s := range []int{70, 129, 131, 135, 140} {
		w.now = t0.Add(time.Duration(s) * time.Second)
		pass()
		if s == 129 && w.ledger.Autoscale.Desired != 1 {
			t.Fatalf("scaled down before the delay: %+v", w.ledger.Autoscale)
		}
	}
	if len(w.owned) != 0 || w.ledger.Autoscale.Desired != 0 {
		t.Fatalf("not scaled to zero: %d members, %+v", len(w.owned), w.ledger.Autoscale)
	}
}

// Switching replicas → autoscale → replicas keeps the members: no member is replaced.
func TestPlanAutoscaleSwitchIsNoRestart(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":3}`)
	w.step()
	before := sortedKeys(w.owned)
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"autoscale":{"min":1,"max":5}}`)
	for range 3 {
		w.step()
	}
	if got := sortedKeys(w.owned); fmt.Sprint(got) != fmt.Sprint(before) || w.ledger.Autoscale.Desired != 3 {
		t.Fatalf("to autoscale: members %v, were %v; state %+v", got, before, w.ledger.Autoscale)
	}
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":4}`)
	w.step()
	if got := sortedKeys(w.owned); len(got) != 4 || w.ledger.Autoscale != nil || countDraining(w.ledger) != 0 {
		t.Fatalf("back to replicas: members %v, record %+v", got, w.ledger)
	}
	for _, n := range before {
		if _, ok := w.owned[n]; !ok {
			t.Fatalf("member %s replaced by the switch", n)
		}
	}
}

func findEvent(evs []events.Event, r events.Reason) *events.Event {
	for i := range evs {
		if evs[i].Reason == r {
			return &evs[i]
		}
	}
	return nil
}

func countDraining(l *events.PoolStatus) int {
	n := 0
	for _, m := range l.Members {
		if !m.DrainingSince.IsZero() || m.Deleting {
			n++
		}
	}
	return n
}

// stepWith plans once with the leasers' demand and applies the outcome.
func (w *world) stepWith(demand events.DemandSum) outcome {
	in := w.input()
	in.Demand = demand
	out := plan(in)
	w.apply(out)
	return out
}
