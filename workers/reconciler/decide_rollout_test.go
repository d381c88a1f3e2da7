package reconciler

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// rolloutCases are the rows of TestDecide for changes that need a new instance: they roll
// under the provider's budget, draining first, or wait for the pool (rollout.go).
func rolloutCases(p Policy) []decideCase {
	port := `{"provider":"local","port":8080}`
	draining := func(s *schemas.ProxySpec, started time.Time) *events.ProxyStatus {
		st := running(s)
		st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutDraining, Scope: "provider local", Since: started, StartedAt: started}
		return st
	}
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
		{"rollout: a spec change with room in the budget drains first, no op", func(t *testing.T) Input {
			in := input(t, spec(t, port), running(spec(t, base)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 2, Active: 1, Leases: -1}
			return in
		}, decideWant{phase: events.PhaseDraining, reason: events.ReasonRolloutDraining, check: func(t *testing.T, d Decision) {
			stage(events.RolloutDraining)(t, d)
			if d.Status.Teardown != "" || !d.Status.Rollout.StartedAt.Equal(t0) || d.Wake.After(t0.Add(p.RolloutPoll)) {
				t.Errorf("teardown %q rollout %+v wake %v", d.Status.Teardown, d.Status.Rollout, d.Wake)
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
		{"rollout: a draining proxy with leases drains on", func(t *testing.T) Input {
			in := input(t, spec(t, port), draining(spec(t, base), t0.Add(-time.Minute)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 1, Leases: 2}
			return in
		}, decideWant{phase: events.PhaseDraining, reason: events.ReasonRolloutDraining, check: stage(events.RolloutDraining)}},
		{"rollout: leases not yet counted drain on", func(t *testing.T) Input {
			in := input(t, spec(t, port), draining(spec(t, base), t0.Add(-time.Minute)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 1, Leases: -1}
			return in
		}, decideWant{phase: events.PhaseDraining, check: stage(events.RolloutDraining)}},
		{"rollout: the drain timeout replaces a proxy whose leases run on", func(t *testing.T) Input {
			in := input(t, spec(t, port), draining(spec(t, base), t0.Add(-p.RolloutDrainTimeout)), t0)
			in.Rollout = RolloutBudget{MaxUnavailable: 1, Leases: 2}
			return in
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: stage(events.RolloutReplacing)}},
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
		}, decideWant{phase: events.PhaseDraining, check: func(t *testing.T, d Decision) {
			stage(events.RolloutDraining)(t, d)
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

// drainedLongAgo is st as a proxy of its own that started draining for a spec change an
// hour ago: with no lease left, its rollout replaces it now.
func drainedLongAgo(st *events.ProxyStatus) *events.ProxyStatus {
	at := t0.Add(-time.Hour)
	st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutDraining, Scope: "provider local", Since: at, StartedAt: at}
	return st
}
