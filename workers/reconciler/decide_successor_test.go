package reconciler

import (
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
)

// The successor-first rollout of a proxy of its own (decision 98, successor.go).

const portSpec = `{"provider":"local","port":8080}`

// succName is the name of the successor of generation g of proxy p1 (uid u1).
func succName(g string) string { return providers.SuccessorName("inst", "u1", g) }

// surging is a running proxy whose successor (generation g2, built for the spec portSpec)
// has been created at t0-1m and has its ID.
func surging(t *testing.T) *events.ProxyStatus {
	st := running(spec(t, base))
	st.Generation = "g1"
	st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutSurging, Scope: "provider local",
		Since: t0.Add(-time.Minute), StartedAt: t0.Add(-time.Minute)}
	st.Successor = &events.InstanceRef{Name: succName("g2"), ID: "local/y", Host: "h1", Generation: "g2", ProvisionAt: t0.Add(-time.Minute),
		SpecHash: spec(t, portSpec).Hash(nil), AuthRevision: 7, NextPollAt: t0.Add(time.Second)}
	return st
}

// retiring is a proxy switched to its successor at `switched`, its first instance retiring.
func retiring(t *testing.T, switched time.Time) *events.ProxyStatus {
	st := running(spec(t, portSpec))
	st.InstanceName, st.InstanceID, st.Generation, st.IP, st.AddressAt = succName("g2"), "local/y", "g2", "127.0.0.3", switched
	st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutRetiring, Scope: "provider local",
		Since: t0.Add(-time.Hour), StartedAt: t0.Add(-time.Hour), SwitchedAt: switched}
	st.Retiring = []events.InstanceRef{{Name: providers.InstanceName("inst", "u1"), ID: "local/x", Host: "h1", Generation: "g1",
		ProvisionAt: t0.Add(-2 * time.Hour), RetiredAt: switched}}
	return st
}

// opOn is an op of kind on the named instance in flight since at.
func opOn(st *events.ProxyStatus, kind events.OpKind, name string, at time.Time) *events.ProxyStatus {
	st.Op = &events.OpRef{Kind: kind, ID: "op1", Host: "h1", IssuedAt: at, Instance: name}
	return st
}

func successorCases(p Policy) []decideCase {
	leases := func(st *events.ProxyStatus, n int) map[string]int {
		return map[string]int{st.Retiring[0].Incarnation(): n}
	}
	return []decideCase{
		{"successor: Running with an address switches the status to it, the old instance retiring", func(t *testing.T) Input {
			in := input(t, spec(t, portSpec), opOn(surging(t), events.OpGet, succName("g2"), t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/y", State: "Running", Address: "127.0.0.3", Port: 8080})
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutRetiring, check: func(t *testing.T, d Decision) {
			st := d.Status
			if st.InstanceName != succName("g2") || st.InstanceID != "local/y" || st.Generation != "g2" || st.Address() != "127.0.0.3:8080" ||
				!st.AddressAt.Equal(t0) || st.SpecHash != spec(t, portSpec).Hash(nil) || st.Successor != nil {
				t.Errorf("status after the switch %+v", st)
			}
			if len(st.Retiring) != 1 || st.Retiring[0].ID != "local/x" || st.Retiring[0].Generation != "g1" || !st.Retiring[0].RetiredAt.Equal(t0) {
				t.Errorf("retiring %+v", st.Retiring)
			}
			if st.Rollout.Stage != events.RolloutRetiring || !st.Rollout.SwitchedAt.Equal(t0) {
				t.Errorf("rollout %+v", st.Rollout)
			}
		}}},
		{"successor: a result for it is routed to its record, not the proxy's own", func(t *testing.T) Input {
			st := opOn(surging(t), events.OpCreate, succName("g2"), t0)
			st.Successor.ID, st.Successor.NextPollAt = "", time.Time{}
			in := input(t, spec(t, portSpec), st, t0)
			in.Result = result(events.OpCreate, events.ClassNone, &events.Instance{ID: "local/y", State: "Provisioning"})
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			st := d.Status
			if st.InstanceID != "local/x" || st.Successor == nil || st.Successor.ID != "local/y" || !st.Successor.NextPollAt.After(t0) {
				t.Errorf("status %+v successor %+v", st, st.Successor)
			}
		}}},
		{"successor: a permanent error never latches the proxy Failed; it retires", func(t *testing.T) Input {
			in := input(t, spec(t, portSpec), opOn(surging(t), events.OpCreate, succName("g2"), t0), t0)
			in.Result = result(events.OpCreate, events.ClassPermanent, nil)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			st := d.Status
			if st.Successor != nil || len(st.Retiring) != 1 || st.Retiring[0].Name != succName("g2") || !st.RetryAt.After(t0) || st.LastError == nil {
				t.Errorf("successor %+v retiring %+v retryAt %v", st.Successor, st.Retiring, st.RetryAt)
			}
		}}},
		{"successor: a stale create retires it (trap 4)", func(t *testing.T) Input {
			in := input(t, spec(t, portSpec), opOn(surging(t), events.OpCreate, succName("g2"), t0), t0)
			in.Result = result(events.OpCreate, events.ClassStale, nil)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Successor != nil || len(d.Status.Retiring) != 1 {
				t.Errorf("successor %+v retiring %+v", d.Status.Successor, d.Status.Retiring)
			}
		}}},
		{"successor: the spec edited again retires the outdated successor, deleted by name once settled", func(t *testing.T) Input {
			st := surging(t)
			st.Successor.ID = "" // its create's result was lost: deleted by name (trap 3)
			st.Successor.RetiredAt = t0
			st.Retiring = []events.InstanceRef{*st.Successor}
			st.Successor = nil
			st.Retiring[0].RetiredAt = t0.Add(-retireSettle)
			in := input(t, spec(t, `{"provider":"local","port":9090}`), st, t0)
			in.Rollout.Instances = map[string]int{}
			return in
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			op := d.Ops[0]
			if op.InstanceName != succName("g2") || op.InstanceID != "" || d.Status.Op.Instance != succName("g2") {
				t.Errorf("op %+v, want a delete of the outdated successor by name", op)
			}
		}}},
		{"successor: one whose spec moved on is retired, and no lease is waited for before its delete", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","port":9090}`), surging(t), t0)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Successor != nil || len(d.Status.Retiring) != 1 || d.Status.Rollout.Stage != events.RolloutSurging || !d.Wake.Equal(t0.Add(retireSettle)) {
				t.Errorf("successor %+v retiring %+v rollout %+v wake %v", d.Status.Successor, d.Status.Retiring, d.Status.Rollout, d.Wake)
			}
		}}},
		{"successor: polled while it has no address, by its name", func(t *testing.T) Input {
			return input(t, spec(t, portSpec), surging(t), t0.Add(2*time.Second))
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpGet}, check: func(t *testing.T, d Decision) {
			if op := d.Ops[0]; op.InstanceName != succName("g2") || op.InstanceID != "local/y" {
				t.Errorf("op %+v", op)
			}
		}}},
		{"successor: a create without a result is sent again under the same name", func(t *testing.T) Input {
			st := surging(t)
			st.Successor.ID, st.Successor.NextPollAt = "", time.Time{}
			return input(t, spec(t, portSpec), st, t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if op := d.Ops[0]; op.InstanceName != succName("g2") || op.Generation != "g2" {
				t.Errorf("op %+v", op)
			}
		}}},
		{"successor: a new leader rebuilds the op on it from the status (OpFor)", func(t *testing.T) Input {
			return input(t, spec(t, portSpec), opOn(surging(t), events.OpCreate, succName("g2"), t0), t0.Add(time.Second))
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			op := OpFor("p1", *d.Status)
			if op.ID != "op1" || op.InstanceName != succName("g2") || op.Generation != "g2" || op.SpecHash != d.Status.Successor.SpecHash || op.UID != "u1" {
				t.Errorf("rebuilt op %+v", op)
			}
		}}},
		{"successor: the create-rate limit holds it back; the proxy serves on", func(t *testing.T) Input {
			st := surging(t)
			st.Successor = nil
			in := input(t, spec(t, portSpec), st, t0)
			in.CreateAt = t0.Add(5 * time.Second)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Successor != nil || !d.Wake.Equal(t0.Add(5*time.Second)) {
				t.Errorf("successor %+v wake %v", d.Status.Successor, d.Wake)
			}
		}}},
		{"successor: a provider at its instance limit holds it back", func(t *testing.T) Input {
			st := surging(t)
			st.Successor = nil
			in := input(t, spec(t, portSpec), st, t0)
			in.Limit = &InstanceLimit{Max: 3, Count: 3}
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutSurging, check: func(t *testing.T, d Decision) {
			if d.Status.Successor != nil || d.Wake.IsZero() || d.Status.Rollout.Stage != events.RolloutSurging {
				t.Errorf("successor %+v wake %v rollout %+v", d.Status.Successor, d.Wake, d.Status.Rollout)
			}
		}}},
		{"retiring: leases held on the old instance keep it, with no timeout", func(t *testing.T) Input {
			st := retiring(t, t0.Add(-24*time.Hour))
			in := input(t, spec(t, portSpec), st, t0)
			in.Rollout.Instances = leases(st, 2)
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutRetiring, check: func(t *testing.T, d Decision) {
			if len(d.Status.Retiring) != 1 || d.Wake.After(t0.Add(p.RolloutPoll)) {
				t.Errorf("retiring %+v wake %v", d.Status.Retiring, d.Wake)
			}
		}}},
		{"retiring: leases not counted keep it", func(t *testing.T) Input {
			return input(t, spec(t, portSpec), retiring(t, t0.Add(-time.Hour)), t0)
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutRetiring}},
		{"retiring: leases are counted only once the switch settled", func(t *testing.T) Input {
			st := retiring(t, t0.Add(-time.Second))
			in := input(t, spec(t, portSpec), st, t0)
			in.Rollout.Instances = leases(st, 0)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(2 * time.Second)) {
				t.Errorf("wake %v, want the end of the settle", d.Wake)
			}
		}}},
		{"retiring: its last lease ended, it is deleted by its name and ID", func(t *testing.T) Input {
			st := retiring(t, t0.Add(-time.Minute))
			in := input(t, spec(t, portSpec), st, t0)
			in.Rollout.Instances = map[string]int{st.Incarnation(): 3} // leases on the new instance do not count
			return in
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			op := d.Ops[0]
			if op.InstanceName != providers.InstanceName("inst", "u1") || op.InstanceID != "local/x" || d.Status.InstanceName != succName("g2") {
				t.Errorf("op %+v status name %s", op, d.Status.InstanceName)
			}
		}}},
		{"retiring: its delete confirmed and the proxy Ready on its successor, the rollout is done", func(t *testing.T) Input {
			st := opOn(retiring(t, t0.Add(-time.Minute)), events.OpDelete, providers.InstanceName("inst", "u1"), t0)
			in := input(t, spec(t, portSpec), st, t0)
			in.Result = result(events.OpDelete, events.ClassNotFound, nil)
			in.Health = &events.ProxyHealth{Address: "127.0.0.3:8080", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0}
			return in
		}, decideWant{phase: events.PhaseReady, reason: "-", check: func(t *testing.T, d Decision) {
			if d.Status.Rollout != nil || len(d.Status.Retiring) != 0 || !slices.ContainsFunc(d.Events, func(e events.Event) bool { return e.Reason == events.ReasonRolloutReplaced }) {
				t.Errorf("rollout %+v retiring %+v events %+v", d.Status.Rollout, d.Status.Retiring, d.Events)
			}
		}}},
		{"retiring: nothing retires but the successor is not probed yet: its place is kept", func(t *testing.T) Input {
			st := retiring(t, t0.Add(-time.Minute))
			st.Retiring = nil
			return input(t, spec(t, portSpec), st, t0)
		}, decideWant{phase: events.PhaseRunning, reason: "-", check: func(t *testing.T, d Decision) {
			if d.Status.Rollout == nil || !d.Status.Rollout.Counts() {
				t.Errorf("rollout %+v, want its place kept until Ready", d.Status.Rollout)
			}
		}}},
		{"retiring: the name on the status stays the successor's (trap 5)", func(t *testing.T) Input {
			return input(t, spec(t, portSpec), retiring(t, t0.Add(-time.Minute)), t0)
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.InstanceName != succName("g2") {
				t.Errorf("instance name %s", d.Status.InstanceName)
			}
		}}},
		{"retiring: a new own instance never takes a retiring instance's name", func(t *testing.T) Input {
			st := retiring(t, t0.Add(-time.Minute))
			st.InstanceID, st.IP, st.ProvisionAt, st.Generation, st.SpecHash = "", "", time.Time{}, "", ""
			in := input(t, spec(t, portSpec), st, t0)
			in.Rollout.Instances = leases(st, 1)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if op := d.Ops[0]; op.InstanceName == providers.InstanceName("inst", "u1") || op.InstanceName != succName(op.Generation) {
				t.Errorf("create %+v under a retiring instance's name", op)
			}
		}}},
		{"teardown: a deleted proxy deletes its successor and retiring instances first", func(t *testing.T) Input {
			st := surging(t)
			st.Retiring = []events.InstanceRef{{Name: "egress-older", ID: "local/o", Host: "h1", RetiredAt: t0}}
			in := input(t, nil, st, t0)
			in.Rollout.Instances = map[string]int{"local/o@0001-01-01T00:00:00Z": 5}
			return in
		}, decideWant{phase: events.PhaseDeleting, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if op := d.Ops[0]; op.InstanceName != "egress-older" || d.Status.Successor != nil || len(d.Status.Retiring) != 2 {
				t.Errorf("op %+v status %+v", op, d.Status)
			}
		}}},
		{"teardown: a deleted proxy is removed only once its extras are gone", func(t *testing.T) Input {
			st := retiring(t, t0)
			st.InstanceID, st.IP, st.ProvisionAt, st.Rollout = "", "", time.Time{}, nil
			st.Teardown = events.ReasonProxyDeleted
			return input(t, nil, st, t0)
		}, decideWant{phase: events.PhaseDeleting, ops: []events.OpKind{events.OpDelete}}},
		{"teardown: a provider change deletes the extras on the old provider first", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm"}`), surging(t), t0)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if op := d.Ops[0]; op.Provider != "local" || op.InstanceName != succName("g2") {
				t.Errorf("op %+v", op)
			}
		}}},
		{"rollout: a change undone while surging retires the successor, and ends with no event", func(t *testing.T) Input {
			in := input(t, spec(t, base), surging(t), t0)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Successor != nil || len(d.Status.Retiring) != 1 || d.Status.Rollout.Stage != events.RolloutRetiring || len(d.Events) != 0 {
				t.Errorf("status %+v events %+v", d.Status, d.Events)
			}
		}}},
	}
}
