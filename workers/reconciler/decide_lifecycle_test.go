package reconciler

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
)

// lifecycleCases are the rows of TestDecide about the lifecycle: create, poll, replace, fail, delete, external proxies.
func lifecycleCases(p Policy) []decideCase {
	return []decideCase{
		{"new proxy is created", func(t *testing.T) Input {
			return input(t, spec(t, base), nil, t0)
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating, check: func(t *testing.T, d Decision) {
			op := d.Ops[0]
			if d.Status.UID == "" || op.UID != d.Status.UID || op.InstanceName != providers.InstanceName("inst", d.Status.UID) {
				t.Errorf("identity: status uid %q, op %+v", d.Status.UID, op)
			}
			if op.Host != "h1" || op.Provider != "local" || op.SpecHash == "" || op.SpecRevision != 7 {
				t.Errorf("op = %+v", op)
			}
			if d.Status.Op == nil || d.Status.Op.ID != op.ID || !d.Status.ProvisionAt.Equal(t0) {
				t.Errorf("status op/provisionAt: %+v", d.Status)
			}
			if len(d.Events) != 1 || d.Events[0].Phase != events.PhaseProvisioning {
				t.Errorf("events = %+v", d.Events)
			}
		}}},
		{"create result running records the address", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.InstanceID, st.IP, st.Phase = "", "", events.PhaseProvisioning
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassNone, runningInst)
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.IP != "127.0.0.2" || d.Status.InstanceID != "local/x" || d.Status.Op != nil {
				t.Errorf("status = %+v", d.Status)
			}
			if !d.Wake.Equal(t0.Add(p.DriftPoll)) {
				t.Errorf("wake = %v, want drift poll", d.Wake)
			}
		}}},
		{"provisioning instance is read when its poll is due", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt, st.NextPollAt = "", events.PhaseProvisioning, t0.Add(-time.Minute), t0
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpGet}}},
		{"provisioning result schedules the next poll", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-time.Minute)
			in := input(t, spec(t, base), withOp(st, events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, decideWant{phase: events.PhaseProvisioning, reason: events.ReasonWaitingForAddress, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.ProvisioningPoll)) {
				t.Errorf("wake = %v, want +10s (a quarter of the minute it has waited, capped)", d.Wake)
			}
		}}},
		{"running instance waits for the drift poll", func(t *testing.T) Input {
			return input(t, spec(t, base), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(time.Minute)) {
				t.Errorf("wake = %v", d.Wake)
			}
		}}},
		{"drift poll is a get", func(t *testing.T) Input {
			return input(t, spec(t, base), running(spec(t, base)), t0.Add(2*time.Minute))
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpGet}}},
		{"spec hash change never deletes the running instance: its successor comes first", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Rollout = &events.Rollout{Reason: events.ReasonSpecChanged, Stage: events.RolloutSurging, Scope: "provider local",
				Since: t0.Add(-time.Minute), StartedAt: t0.Add(-time.Minute)}
			return input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.Teardown != "" || d.Ops[0].InstanceName == d.Status.InstanceName || d.Status.InstanceID != "local/x" {
				t.Errorf("teardown %q op %+v", d.Status.Teardown, d.Ops[0])
			}
		}}},
		{"attribute, lease and health changes do not replace", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","attributes":{"geo":"de"},"maxLeases":5,"healthCheck":{"intervalSeconds":10}}`), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseRunning}},
		{"replacement waits for delete, then creates under the same name", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonSpecChanged
			in := input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
			in.Result = result(events.OpDelete, events.ClassNotFound, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].InstanceName != providers.InstanceName("inst", "u1") || d.Status.Teardown != "" {
				t.Errorf("op %+v teardown %q", d.Ops[0], d.Status.Teardown)
			}
		}}},
		{"a delete that has not finished is repeated after the deletion poll", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonSpecChanged
			in := input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
			in.Result = result(events.OpDelete, events.ClassNone, &events.Instance{ID: "local/x", State: "Running", Address: "127.0.0.2"})
			return in
		}, decideWant{phase: events.PhaseReplacing, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.DeletionPoll)) {
				t.Errorf("wake = %v", d.Wake)
			}
		}}},
		{"stopped instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Stopped"})
			return in
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceStopped"}},
		{"terminated instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Terminated"})
			return in
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceTerminated"}},
		{"vanished instance is created again", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"quota waits five minutes", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassQuota, nil)
			return in
		}, decideWant{phase: events.PhaseWaiting, reason: events.ReasonQuota, check: func(t *testing.T, d Decision) {
			if !d.Status.RetryAt.Equal(t0.Add(5*time.Minute)) || d.Status.LastError == nil {
				t.Errorf("retryAt %v lastError %+v", d.Status.RetryAt, d.Status.LastError)
			}
		}}},
		{"a proxy deleted while its create waits out a quota back-off is deleted at once", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseWaiting, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0.Add(-time.Minute),
				Reason: events.ReasonQuota, RetryAt: t0.Add(4 * time.Minute), Failures: 1,
				LastError: &events.LastError{Class: events.ClassQuota, At: t0.Add(-time.Minute), Message: "quota"}}
			return input(t, nil, st, t0)
		}, decideWant{phase: events.PhaseDeleting, ops: []events.OpKind{events.OpDelete}}},
		{"quota on a get (an asynchronous create failed) waits, then creates again", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-time.Minute)
			in := input(t, spec(t, base), withOp(st, events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassQuota, nil)
			return in
		}, decideWant{phase: events.PhaseWaiting, reason: events.ReasonQuota, check: func(t *testing.T, d Decision) {
			if !d.Status.RetryAt.Equal(t0.Add(5*time.Minute)) || d.Status.InstanceID != "" || !d.Status.ProvisionAt.IsZero() {
				t.Errorf("retryAt %v instanceID %q provisionAt %v: want the wait and no instance", d.Status.RetryAt, d.Status.InstanceID, d.Status.ProvisionAt)
			}
			after := Decide(p, input(t, spec(t, base), d.Status, t0.Add(5*time.Minute)))
			if len(after.Ops) != 1 || after.Ops[0].Kind != events.OpCreate {
				t.Errorf("after the wait: ops %+v, want a create", after.Ops)
			}
		}}},
		{"quota retries after the wait", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseWaiting, UID: "u1", Provider: "local", Host: "h1",
				ProvisionAt: t0, Reason: events.ReasonQuota, RetryAt: t0.Add(5 * time.Minute)}
			return input(t, spec(t, base), st, t0.Add(5*time.Minute))
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"transient failure backs off with the error visible", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0, Failures: 2}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassTransient, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, reason: events.ReasonTransient, check: func(t *testing.T, d Decision) {
			if d.Status.Failures != 3 || !d.Status.RetryAt.Equal(t0.Add(4*p.BackoffBase)) {
				t.Errorf("failures %d retryAt %v", d.Status.Failures, d.Status.RetryAt)
			}
			if d.Status.LastError == nil || d.Status.LastError.Class != events.ClassTransient || !strings.Contains(d.Status.Message, "backend said") {
				t.Errorf("lastError %+v message %q", d.Status.LastError, d.Status.Message)
			}
		}}},
		{"a retried op shows its error and keeps the op in flight", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassTransient, nil)
			in.Result.Final, in.Result.Attempt = false, 2
			return in
		}, decideWant{phase: events.PhaseProvisioning, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.Op.Attempts != 2 || d.Status.LastError == nil {
				t.Errorf("op %+v lastError %+v", d.Status.Op, d.Status.LastError)
			}
		}}},
		{"permanent failure latches Failed", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0, SpecRevision: 7}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassPermanent, nil)
			return in
		}, decideWant{phase: events.PhaseFailed, reason: events.ReasonPermanent}},
		{"Failed stays latched for the same revision", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 7, Reason: events.ReasonPermanent}
			return input(t, spec(t, base), st, t0.Add(time.Hour))
		}, decideWant{phase: events.PhaseFailed, reason: events.ReasonPermanent}},
		{"a new spec revision unlatches Failed", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 6, Reason: events.ReasonPermanent}
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"a missed provisioning deadline recreates", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline)
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: events.ReasonDeadline, check: func(t *testing.T, d Decision) {
			if d.Status.Deadlines != 1 {
				t.Errorf("deadlines = %d", d.Status.Deadlines)
			}
		}}},
		{"the third missed deadline fails", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt, st.Deadlines = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline), 2
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseFailed, reason: events.ReasonDeadline}},
		{"external proxies make no provider calls", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5","port":8080}}`), nil, t0)
		}, decideWant{phase: events.PhaseRunning, reason: events.ReasonExternalEndpoint, check: func(t *testing.T, d Decision) {
			if d.Status.IP != "10.0.0.5" || d.Status.Port != 8080 || d.Status.Mode != "external" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"switching to external deletes the managed instance first", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5"}}`), running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}}},
		{"deleting the key deletes the instance", func(t *testing.T) Input {
			return input(t, nil, running(spec(t, base)), t0)
		}, decideWant{phase: events.PhaseDeleting, ops: []events.OpKind{events.OpDelete}}},
		{"once the instance is gone the status is removed", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, events.ClassNone, nil)
			return in
		}, decideWant{removed: true, check: func(t *testing.T, d Decision) {
			if len(d.Events) != 1 || d.Events[0].Kind != events.KindDeleted {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"a deleted proxy waits for its create to finish before deleting", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			return input(t, nil, withOp(st, events.OpCreate, t0), t0.Add(time.Second))
		}, decideWant{phase: events.PhaseDeleting}},
		{"a deleted external proxy is removed at once", func(t *testing.T) Input {
			return input(t, nil, &events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "external", IP: "10.0.0.5"}, t0)
		}, decideWant{removed: true}},
		{"a permanent delete error is retried, never latched", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, events.ClassPermanent, nil)
			return in
		}, decideWant{phase: events.PhaseDeleting, reason: events.ReasonTransient}},
	}
}
