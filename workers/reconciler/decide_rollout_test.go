package reconciler

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
)

// rolloutCases are the rows of TestDecide for changes that need a new instance: they roll
// under the provider's budget, successor first, or wait for the pool (rollout.go).
func rolloutCases(p Policy) []decideCase {
	port := `{"provider":"local","port":8080}`
	stage := func(want events.RolloutStage) func(t *testing.T, d Decision) {
		return func(t *testing.T, d Decision) {
			t.Helper()
			got := events.RolloutStage("none")
			if d.Status.Rollout != nil {
				got = d.Status.Rollout.Stage
			}
			if got != want {
				t.Errorf("rollout stage = %s, want %s (%+v)", got, want, d.Status.Rollout)
			}
		}
	}
	withAuth := func(t *testing.T, provider, password string) *schemas.ProxySpec {
		return spec(t, `{"provider":"`+provider+`","auth":{"username":"u","password":"`+password+`"}}`)
	}
	return []decideCase{
		{"rollout: a spec change with room in the budget surges a successor beside the instance", func(t *testing.T) Input {
			in := input(t, spec(t, port), running(spec(t, base)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 2, Active: 1}
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutSurging, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			stage(events.RolloutSurging)(t, d)
			st, s, op := d.Status, d.Status.Successor, d.Ops[0]
			if st.Teardown != "" || !st.Rollout.StartedAt.Equal(t0) || s == nil || st.InstanceName != providers.InstanceName("inst", "u1") {
				t.Fatalf("teardown %q rollout %+v successor %+v name %s", st.Teardown, st.Rollout, s, st.InstanceName)
			}
			if s.Name != providers.SuccessorName("inst", "u1", s.Generation) || s.SpecHash != spec(t, port).Hash(nil) || !s.ProvisionAt.Equal(t0) {
				t.Errorf("successor %+v", s)
			}
			if st.Op.Instance != s.Name || op.InstanceName != s.Name || op.Generation != s.Generation || op.SpecHash != s.SpecHash || op.InstanceID != "" {
				t.Errorf("op ref %+v op %+v, want the successor's create", st.Op, op)
			}
		}}},
		{"rollout: a full budget keeps the outdated instance serving", func(t *testing.T) Input {
			in := input(t, spec(t, port), running(spec(t, base)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 2, Active: 2}
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutWaiting, check: stage(events.RolloutWaiting)}},
		{"rollout: a paused scope starts nothing", func(t *testing.T) Input {
			in := input(t, spec(t, port), running(spec(t, base)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 5, Paused: true}
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutPaused, check: stage(events.RolloutPaused)}},
		{"rollout: a proxy an earlier release left draining surges instead", func(t *testing.T) Input {
			return input(t, spec(t, port), drainedLongAgo(running(spec(t, base))), t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			stage(events.RolloutSurging)(t, d)
			if d.Status.Successor == nil || !d.Status.Rollout.StartedAt.Equal(t0.Add(-time.Hour)) {
				t.Errorf("successor %+v rollout %+v", d.Status.Successor, d.Status.Rollout)
			}
		}}},
		{"rollout: a replacement an earlier release started goes on", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Teardown = events.ReasonSpecChanged
			st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutReplacing, Scope: "provider local", Since: t0}
			return input(t, spec(t, port), st, t0)
		}, decideWant{phase: events.PhaseReplacing, reason: events.ReasonSpecChanged, ops: []events.OpKind{events.OpDelete}, check: stage(events.RolloutReplacing)}},
		{"rollout: a pool member only waits for its pool", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080,"pool":"web"}`), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutWaiting, check: func(t *testing.T, d Decision) {
			stage(events.RolloutWaiting)(t, d)
			if d.Status.Rollout.Scope != "pool web" || d.Status.Teardown != "" {
				t.Errorf("rollout %+v teardown %q", d.Status.Rollout, d.Status.Teardown)
			}
		}}},
		{"rollout: a pool member of a paused pool says so", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","port":8080,"pool":"web"}`), running(spec(t, base)), t0)
			in.Rollout = RolloutBudget{Paused: true}
			return in
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutPaused, check: stage(events.RolloutPaused)}},
		{"rollout: a change undone before its turn ends the rollout", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutWaiting, Scope: "provider local", Since: t0}
			st.Reason = events.ReasonRolloutWaiting
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseRunning, reason: "-", check: stage("none")}},
		{"rollout: Ready on the new instance frees the place, with an event", func(t *testing.T) Input {
			st := ready(spec(t, port))
			st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutReplacing, Scope: "provider local", Since: t0}
			in := input(t, spec(t, port), st, t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:8080", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, decideWant{phase: events.PhaseReady, check: func(t *testing.T, d Decision) {
			stage("none")(t, d)
			found := false
			for _, ev := range d.Events {
				found = found || ev.Reason == events.ReasonRolloutReplaced
			}
			if !found {
				t.Errorf("no RolloutReplaced event in %+v", d.Events)
			}
		}}},
		{"credentials: a provider that cannot update them rolls a new instance", func(t *testing.T) Input {
			st := running(withAuth(t, "kvm", "old"))
			st.Provider, st.Host, st.AuthHash, st.AuthRevision = "kvm", "a", authHash("u1", withAuth(t, "kvm", "old").Auth), 3
			return input(t, withAuth(t, "kvm", "new"), st, t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			stage(events.RolloutSurging)(t, d)
			if d.Status.Rollout.Reason != events.ReasonCredentialsChanged || d.Status.AuthRevision != 3 {
				t.Errorf("rollout %+v authRevision %d, want CredentialsChanged and 3 (the instance's)", d.Status.Rollout, d.Status.AuthRevision)
			}
		}}},
		{"credentials: local updates them in place", func(t *testing.T) Input {
			st := running(withAuth(t, "local", "old"))
			st.AuthHash, st.AuthRevision = authHash("u1", withAuth(t, "local", "old").Auth), 3
			return input(t, withAuth(t, "local", "new"), st, t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			stage("none")(t, d)
			if d.Status.AuthRevision != 7 {
				t.Errorf("authRevision %d, want 7", d.Status.AuthRevision)
			}
		}}},
		{"credentials: an unchanged auth follows the newest revision", func(t *testing.T) Input {
			st := running(withAuth(t, "kvm", "same"))
			st.Provider, st.Host, st.AuthHash, st.AuthRevision = "kvm", "a", authHash("u1", withAuth(t, "kvm", "same").Auth), 3
			return input(t, withAuth(t, "kvm", "same"), st, t0)
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.AuthRevision != 7 || d.Status.Rollout != nil {
				t.Errorf("authRevision %d rollout %+v", d.Status.AuthRevision, d.Status.Rollout)
			}
		}}},
	}
}

// drainedLongAgo is st as a proxy of its own that an earlier release started draining for a
// spec change an hour ago: it is rolled successor first now.
func drainedLongAgo(st *events.ProxyStatus) *events.ProxyStatus {
	at := t0.Add(-time.Hour)
	st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutDraining, Scope: "provider local", Since: at, StartedAt: at}
	return st
}
