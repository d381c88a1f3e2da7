package reconciler

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// expiring is a running proxy whose instance's mark says its lifetime ends at end.
func expiring(t *testing.T, end time.Time) *events.ProxyStatus {
	st := running(spec(t, base))
	st.ExpiresAt = end
	return st
}

// lifetimeCases are the rows of TestDecide about maxLifetimeSeconds (decision 0076): the
// instance's own mark says when it ends; the reconciler replaces it then, or creates it
// again after the collector deleted it, and says LifetimeExceeded either way.
func lifetimeCases(p Policy) []decideCase {
	return []decideCase{
		{"a create result records the lifetime's end from the instance's mark", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.InstanceID, st.IP, st.Phase = "", "", events.PhaseProvisioning
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			inst := *runningInst
			inst.ExpiresAt = t0.Add(20 * time.Second)
			in.Result = result(events.OpCreate, events.ClassNone, &inst)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if !d.Status.ExpiresAt.Equal(t0.Add(20 * time.Second)) {
				t.Errorf("expiresAt = %v, want the mark's %v", d.Status.ExpiresAt, t0.Add(20*time.Second))
			}
			if !d.Wake.Equal(t0.Add(20 * time.Second)) {
				t.Errorf("wake = %v, want the lifetime's end, before the drift poll", d.Wake)
			}
		}}},
		{"a running instance within its lifetime is left alone until its end", func(t *testing.T) Input {
			return input(t, spec(t, base), expiring(t, t0.Add(30*time.Second)), t0)
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(30 * time.Second)) {
				t.Errorf("wake = %v, want %v", d.Wake, t0.Add(30*time.Second))
			}
		}}},
		{"an instance past its lifetime is replaced: LifetimeExceeded, delete first", func(t *testing.T) Input {
			return input(t, spec(t, base), expiring(t, t0), t0)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: events.ReasonLifetimeExceeded, check: func(t *testing.T, d Decision) {
			if d.Status.Teardown != events.ReasonLifetimeExceeded || len(d.Ops) != 1 || d.Ops[0].InstanceID != "local/x" {
				t.Errorf("teardown %q ops %+v", d.Status.Teardown, d.Ops)
			}
			if !strings.Contains(d.Status.Message, "lifetime") || len(d.Events) != 1 || d.Events[0].Reason != events.ReasonLifetimeExceeded {
				t.Errorf("message %q events %+v", d.Status.Message, d.Events)
			}
		}}},
		{"after the delete, a new instance is created and the reason stays until it runs", func(t *testing.T) Input {
			st := withOp(expiring(t, t0.Add(-time.Second)), events.OpDelete, t0)
			st.Teardown, st.Reason, st.Message = events.ReasonLifetimeExceeded, events.ReasonLifetimeExceeded, "the instance passed its lifetime"
			in := input(t, spec(t, base), st, t0)
			in.Result = result(events.OpDelete, events.ClassNotFound, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonLifetimeExceeded, check: func(t *testing.T, d Decision) {
			if d.Status.Teardown != "" || !d.Status.ExpiresAt.IsZero() {
				t.Errorf("teardown %q expiresAt %v, want both cleared with the instance", d.Status.Teardown, d.Status.ExpiresAt)
			}
		}}},
		{"an instance the collector deleted for its lifetime is created again: LifetimeExceeded", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(expiring(t, t0.Add(-time.Minute)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonLifetimeExceeded, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "collector") {
				t.Errorf("message %q, want it to say the collector deleted it", d.Status.Message)
			}
		}}},
		{"an instance gone before its lifetime's end is InstanceLost, not LifetimeExceeded", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(expiring(t, t0.Add(time.Hour)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"the new instance running clears LifetimeExceeded", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.InstanceID, st.IP, st.Phase, st.Reason = "", "", events.PhaseProvisioning, events.ReasonLifetimeExceeded
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassNone, runningInst)
			return in
		}, decideWant{phase: events.PhaseRunning, reason: "-"}},
	}
}
