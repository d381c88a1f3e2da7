package reconciler

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// healthCases are the rows of TestDecide about verdicts: health, drain, anonymity, egress, credentials.
func healthCases(p Policy) []decideCase {
	return []decideCase{
		{"a healthy verdict on the address makes it Ready", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, decideWant{phase: events.PhaseReady, check: func(t *testing.T, d Decision) {
			if !d.Status.ReadyAt.Equal(t0) {
				t.Errorf("readyAt %v", d.Status.ReadyAt)
			}
		}}},
		{"a healthy proxy whose spec says drain is Draining, with no op: drain never replaces", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","drain":true,"pool":"web"}`), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, decideWant{phase: events.PhaseDraining, check: func(t *testing.T, d Decision) {
			if len(d.Ops) != 0 || d.Status.InstanceID != "local/x" {
				t.Errorf("ops %v, status %+v", d.Ops, d.Status)
			}
		}}},
		{"an unhealthy draining proxy is Draining too", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","drain":true}`), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 3, FailureThreshold: 3, SuccessThreshold: 1}
			return in
		}, decideWant{phase: events.PhaseDraining}},
		{"failures past the threshold make it Unhealthy", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 3, FailureThreshold: 3, SuccessThreshold: 1, LastError: "connection refused"}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing, check: func(t *testing.T, d Decision) {
			if d.Status.Message != "connection refused" || len(d.Ops) != 0 {
				t.Errorf("message %q ops %v", d.Status.Message, d.Ops)
			}
			if !d.Wake.Equal(t0.Add(p.ProvisioningPoll)) {
				t.Errorf("an unhealthy proxy is polled at %v, want within the provisioning poll", d.Wake)
			}
		}}},
		{"failures below the threshold keep it Running", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 2, FailureThreshold: 3, SuccessThreshold: 1}
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"a verdict on an old address counts for nothing", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.9:3128", Healthy: true, ConsecutiveSuccesses: 5, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"a healthy external proxy is Ready", func(t *testing.T) Input {
			in := input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5","port":8080}}`), nil, t0)
			in.Health = &events.ProxyHealth{Address: "10.0.0.5:8080", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3,
				LastProbeAt: t0}
			return in
		}, decideWant{phase: events.PhaseReady}},
		{"a verdict from before the address appeared is a predecessor's: Running", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.AddressAt = events.PhaseRunning, t0.Add(-time.Second)
			in := input(t, spec(t, base), st, t0)
			in.Health = &events.ProxyHealth{Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Healthy: true, ConsecutiveSuccesses: 5,
				SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0.Add(-20 * time.Second)}
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"a status from before addressAt keeps its verdict", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.AddressAt = events.PhaseReady, time.Time{}
			in := input(t, spec(t, base), st, t0)
			in.Health = &events.ProxyHealth{Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Healthy: true, ConsecutiveSuccesses: 5,
				SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0.Add(-20 * time.Second)}
			return in
		}, decideWant{phase: events.PhaseReady}},
		{"a healthy proxy below requireAnonymity is Unhealthy with HeaderLeak naming the headers", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "X-Forwarded-For", "Via")
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
			if want := "transparent, requires elite: sites see X-Forwarded-For, Via"; d.Status.Message != want {
				t.Errorf("message %q, want %q", d.Status.Message, want)
			}
			if len(d.Ops) != 0 || !d.Wake.Equal(t0.Add(time.Minute)) {
				t.Errorf("a header leak is configuration, not a dead instance: ops %v, wake %v", d.Ops, d.Wake)
			}
			if len(d.Events) != 1 || d.Events[0].Phase != events.PhaseUnhealthy || d.Events[0].From != events.PhaseReady || d.Events[0].Reason != events.ReasonHeaderLeak {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"an external proxy below requireAnonymity is Unhealthy too", func(t *testing.T) Input {
			in := input(t, spec(t, `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128},"healthCheck":{"requireAnonymity":"anonymous"}}`), nil, t0)
			in.Health = anonHealth(events.AnonymityTransparent, "X-Forwarded-For")
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak}},
		{"an anonymous proxy meets requireAnonymity anonymous", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityAnonymous, "Via")
			return in
		}, decideWant{phase: events.PhaseReady, reason: "-"}},
		{"a leaking proxy is Ready under the default requireAnonymity none", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "X-Forwarded-For")
			return in
		}, decideWant{phase: events.PhaseReady, reason: "-"}},
		{"fixed config: Ready again without a spec change, the reason cleared", func(t *testing.T) Input {
			st := ready(spec(t, base))
			st.Phase, st.Reason, st.Message = events.PhaseUnhealthy, events.ReasonHeaderLeak, "transparent, requires elite: sites see Via"
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), st, t0)
			in.Health = anonHealth(events.AnonymityElite)
			return in
		}, decideWant{phase: events.PhaseReady, reason: "-", check: func(t *testing.T, d Decision) {
			if d.Status.Message != "" || len(d.Events) != 1 || d.Events[0].Phase != events.PhaseReady {
				t.Errorf("message %q events %+v", d.Status.Message, d.Events)
			}
		}}},
		{"unknown after an echo on one path counts as below: the failed path is named", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = []events.PathCheck{{Path: events.PathConnect, Anonymity: events.AnonymityElite}, {Path: events.PathForward, Error: "403 Forbidden"}}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
			if want := "anonymity unknown, requires elite: forward: 403 Forbidden"; d.Status.Message != want {
				t.Errorf("message %q, want %q", d.Status.Message, want)
			}
		}}},
		{"a custom check URL gives no echo verdict: fail closed, saying how to fix it", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous","url":"https://example.com/"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = []events.PathCheck{{Path: events.PathConnect}, {Path: events.PathForward}}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "leave healthCheck.url empty") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a record without paths (no anonymity judged yet) keeps a proxy that requires it Running", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = nil
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"a header leak on an unhealthy proxy: ProbeFailing explains more", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "Via")
			in.Health.Healthy, in.Health.ConsecutiveFailures, in.Health.LastError = false, 3, "refused"
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing}},
		{"another egress address than expected is a warning: Ready, EgressMismatch, an event", func(t *testing.T) Input {
			in := input(t, spec(t, base), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, decideWant{phase: events.PhaseReady, reason: events.ReasonEgressMismatch, check: func(t *testing.T, d Decision) {
			if want := "traffic leaves from 198.51.100.7, expected 192.0.2.1"; d.Status.Message != want {
				t.Errorf("message %q, want %q", d.Status.Message, want)
			}
			if len(d.Events) != 1 || d.Events[0].Phase != events.PhaseReady || d.Events[0].From != events.PhaseReady || d.Events[0].Reason != events.ReasonEgressMismatch {
				t.Errorf("a warning appearing is a phase event: %+v", d.Events)
			}
		}}},
		{"the egress address as expected again clears the warning, with an event", func(t *testing.T) Input {
			st := ready(spec(t, base))
			st.Reason, st.Message = events.ReasonEgressMismatch, "traffic leaves from 198.51.100.7, expected 192.0.2.1"
			in := input(t, spec(t, base), st, t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "::ffff:192.0.2.1", "192.0.2.1"
			return in
		}, decideWant{phase: events.PhaseReady, reason: "-", check: func(t *testing.T, d Decision) {
			if len(d.Events) != 1 || d.Events[0].Reason != "" || d.Events[0].Phase != events.PhaseReady {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"an external proxy's egress mismatch replaces ExternalEndpoint", func(t *testing.T) Input {
			in := input(t, spec(t, `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128,"expectedEgress":"192.0.2.1"}}`), nil, t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, decideWant{phase: events.PhaseReady, reason: events.ReasonEgressMismatch}},
		{"a provider error explains more than an egress mismatch", func(t *testing.T) Input {
			st := ready(spec(t, base))
			st.Reason, st.Message = events.ReasonTransient, "backend said transient"
			st.RetryAt = t0.Add(time.Minute)
			in := input(t, spec(t, base), st, t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, decideWant{phase: events.PhaseReady, reason: events.ReasonTransient}},
		{"a header leak outranks an egress mismatch", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityAnonymous, "Via")
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak}},
		{"new credentials are delivered to the running instance, not replaced", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","auth":{"username":"u","password":"new"}}`), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.AuthHash == "" || d.Status.InstanceID != "local/x" || strings.Contains(d.Status.AuthHash, "new") {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a successor says why", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), drainedLongAgo(running(spec(t, base))), t0)
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonRolloutSurging, ops: []events.OpKind{events.OpCreate}}},
		{"changing provider replaces on the old provider", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm"}`), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].Provider != "local" || d.Status.Teardown != events.ReasonProviderChanged {
				t.Errorf("op %+v", d.Ops[0])
			}
		}}},
	}
}
