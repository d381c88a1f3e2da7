package reconciler

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func spec(t *testing.T, js string) *schemas.ProxySpec {
	t.Helper()
	s, err := schemas.ParseProxySpec([]byte(js))
	if err != nil {
		t.Fatalf("spec %s: %v", js, err)
	}
	return &s
}

// input builds a decide input for proxy "p1" on provider "local" with host "h1".
func input(t *testing.T, sp *schemas.ProxySpec, st *events.ProxyStatus, now time.Time) Input {
	n := 0
	return Input{
		Name: "p1", Spec: sp, SpecRevision: 7, Status: st, Now: now, Installation: "inst",
		Catalog: map[string]ProviderInfo{"local": {Hosts: []string{"h1"}}, "kvm": {Hosts: []string{"a", "b"}}},
		NewID:   func() string { n++; return fmt.Sprintf("id%d", n) },
	}
}

// running is the status of a proxy whose instance runs with spec s.
func running(s *schemas.ProxySpec) *events.ProxyStatus {
	return &events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "managed", UID: "u1",
		InstanceName: providers.InstanceName("inst", "u1"), InstanceID: "local/x", Provider: "local", Host: "h1",
		IP: "127.0.0.2", Port: s.Port, SpecHash: s.Hash(nil), SpecRevision: 7,
		ProvisionAt: t0.Add(-time.Hour), NextPollAt: t0.Add(time.Minute), CreatedAt: t0.Add(-time.Hour)}
}

// ready is the status of a Ready proxy running spec s at 127.0.0.2.
func ready(s *schemas.ProxySpec) *events.ProxyStatus {
	st := running(s)
	st.Phase, st.ReadyAt = events.PhaseReady, t0.Add(-time.Hour)
	return st
}

// anonHealth is a healthy record at 127.0.0.2:3128 whose echo verdict is a, leaking headers.
func anonHealth(a events.Anonymity, leaked ...string) *events.ProxyHealth {
	return &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3,
		LastProbeAt: t0, Anonymity: a, LeakedHeaders: leaked, EgressIP: "192.0.2.1",
		Paths: []events.PathCheck{{Path: events.PathConnect, Anonymity: events.AnonymityElite, EgressIP: "192.0.2.1"}, {Path: events.PathForward, Anonymity: a, Leaked: leaked, EgressIP: "192.0.2.1"}}}
}

func withOp(st *events.ProxyStatus, kind events.OpKind, at time.Time) *events.ProxyStatus {
	st.Op = &events.OpRef{Kind: kind, ID: "op1", Host: "h1", IssuedAt: at}
	return st
}

func result(kind events.OpKind, class events.ErrorClass, inst *events.Instance) *events.OpResult {
	r := &events.OpResult{V: 1, OpID: "op1", Kind: kind, Proxy: "p1", Final: true, Instance: inst, ErrorClass: class, At: t0}
	if class != events.ClassNone {
		r.Error = "backend said " + string(class)
	}
	return r
}

var runningInst = &events.Instance{ID: "local/x", Name: "n", State: "Running", Address: "127.0.0.2", Port: 3128}

func TestDecide(t *testing.T) {
	p := DefaultPolicy()
	base := `{"provider":"local"}`
	type want struct {
		phase   events.Phase
		ops     []events.OpKind
		reason  events.Reason
		removed bool
		check   func(t *testing.T, d Decision)
	}
	cases := []struct {
		name string
		in   func(t *testing.T) Input
		want want
	}{
		{"new proxy is created", func(t *testing.T) Input {
			return input(t, spec(t, base), nil, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpGet}}},
		{"provisioning result schedules the next poll", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-time.Minute)
			in := input(t, spec(t, base), withOp(st, events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, want{phase: events.PhaseProvisioning, reason: events.ReasonWaitingForAddress, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.ProvisioningPoll)) {
				t.Errorf("wake = %v, want +10s (a quarter of the minute it has waited, capped)", d.Wake)
			}
		}}},
		{"running instance waits for the drift poll", func(t *testing.T) Input {
			return input(t, spec(t, base), running(spec(t, base)), t0)
		}, want{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(time.Minute)) {
				t.Errorf("wake = %v", d.Wake)
			}
		}}},
		{"drift poll is a get", func(t *testing.T) Input {
			return input(t, spec(t, base), running(spec(t, base)), t0.Add(2*time.Minute))
		}, want{phase: events.PhaseRunning, ops: []events.OpKind{events.OpGet}}},
		{"spec hash change replaces: delete first", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if d.Status.Teardown != events.ReasonSpecChanged || d.Ops[0].InstanceID != "local/x" {
				t.Errorf("teardown %q op %+v", d.Status.Teardown, d.Ops[0])
			}
		}}},
		{"attribute, lease and health changes do not replace", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","attributes":{"geo":"de"},"maxLeases":5,"healthCheck":{"intervalSeconds":10}}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseRunning}},
		{"replacement waits for delete, then creates under the same name", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonSpecChanged
			in := input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
			in.Result = result(events.OpDelete, events.ClassNotFound, nil)
			return in
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseReplacing, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.DeletionPoll)) {
				t.Errorf("wake = %v", d.Wake)
			}
		}}},
		{"stopped instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Stopped"})
			return in
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceStopped"}},
		{"terminated instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Terminated"})
			return in
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceTerminated"}},
		{"vanished instance is created again", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			return in
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"quota waits five minutes", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassQuota, nil)
			return in
		}, want{phase: events.PhaseWaiting, reason: events.ReasonQuota, check: func(t *testing.T, d Decision) {
			if !d.Status.RetryAt.Equal(t0.Add(5*time.Minute)) || d.Status.LastError == nil {
				t.Errorf("retryAt %v lastError %+v", d.Status.RetryAt, d.Status.LastError)
			}
		}}},
		{"quota on a get (an asynchronous create failed) waits, then creates again", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-time.Minute)
			in := input(t, spec(t, base), withOp(st, events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassQuota, nil)
			return in
		}, want{phase: events.PhaseWaiting, reason: events.ReasonQuota, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"transient failure backs off with the error visible", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0, Failures: 2}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassTransient, nil)
			return in
		}, want{phase: events.PhaseProvisioning, reason: events.ReasonTransient, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseProvisioning, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.Op.Attempts != 2 || d.Status.LastError == nil {
				t.Errorf("op %+v lastError %+v", d.Status.Op, d.Status.LastError)
			}
		}}},
		{"permanent failure latches Failed", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0, SpecRevision: 7}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassPermanent, nil)
			return in
		}, want{phase: events.PhaseFailed, reason: events.ReasonPermanent}},
		{"Failed stays latched for the same revision", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 7, Reason: events.ReasonPermanent}
			return input(t, spec(t, base), st, t0.Add(time.Hour))
		}, want{phase: events.PhaseFailed, reason: events.ReasonPermanent}},
		{"a new spec revision unlatches Failed", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 6, Reason: events.ReasonPermanent}
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"a missed provisioning deadline recreates", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline)
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: events.ReasonDeadline, check: func(t *testing.T, d Decision) {
			if d.Status.Deadlines != 1 {
				t.Errorf("deadlines = %d", d.Status.Deadlines)
			}
		}}},
		{"the third missed deadline fails", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt, st.Deadlines = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline), 2
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseFailed, reason: events.ReasonDeadline}},
		{"external proxies make no provider calls", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5","port":8080}}`), nil, t0)
		}, want{phase: events.PhaseRunning, reason: events.ReasonExternalEndpoint, check: func(t *testing.T, d Decision) {
			if d.Status.IP != "10.0.0.5" || d.Status.Port != 8080 || d.Status.Mode != "external" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"switching to external deletes the managed instance first", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5"}}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}}},
		{"deleting the key deletes the instance", func(t *testing.T) Input {
			return input(t, nil, running(spec(t, base)), t0)
		}, want{phase: events.PhaseDeleting, ops: []events.OpKind{events.OpDelete}}},
		{"once the instance is gone the status is removed", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, events.ClassNone, nil)
			return in
		}, want{removed: true, check: func(t *testing.T, d Decision) {
			if len(d.Events) != 1 || d.Events[0].Kind != events.KindDeleted {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"a deleted proxy waits for its create to finish before deleting", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			return input(t, nil, withOp(st, events.OpCreate, t0), t0.Add(time.Second))
		}, want{phase: events.PhaseDeleting}},
		{"a deleted external proxy is removed at once", func(t *testing.T) Input {
			return input(t, nil, &events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "external", IP: "10.0.0.5"}, t0)
		}, want{removed: true}},
		{"a permanent delete error is retried, never latched", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = events.ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, events.ClassPermanent, nil)
			return in
		}, want{phase: events.PhaseDeleting, reason: events.ReasonTransient}},
		{"invalid spec: Invalid naming the problem, nothing done", func(t *testing.T) Input {
			in := input(t, nil, running(spec(t, base)), t0)
			in.SpecErr = errors.New("port: must be between 1 and 65535, got 0")
			return in
		}, want{phase: events.PhaseInvalid, reason: events.ReasonInvalidSpec, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "port") || d.Status.InstanceID != "local/x" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"unknown provider is Invalid", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"nope"}`), nil, t0)
		}, want{phase: events.PhaseInvalid, reason: events.ReasonUnknownProvider, check: func(t *testing.T, d Decision) {
			if !strings.HasPrefix(d.Status.Message, "provider:") || !strings.Contains(d.Status.Message, "local") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a removed provider: Invalid naming provider, its instance left alone", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			delete(in.Catalog, "local")
			return in
		}, want{phase: events.PhaseInvalid, reason: events.ReasonProviderRemoved, check: func(t *testing.T, d Decision) {
			m := d.Status.Message
			if !strings.HasPrefix(m, `provider: "local" is no longer configured (known: kvm)`) || !strings.Contains(m, "127.0.0.2:3128") ||
				!strings.Contains(m, "left alone, unmanaged") || d.Status.InstanceID != "local/x" || d.Status.IP != "127.0.0.2" {
				t.Errorf("status %+v", d.Status)
			}
			if len(d.Events) != 1 || d.Events[0].Reason != events.ReasonProviderRemoved || d.Events[0].Message != m {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"a removed provider's proxy deleted: its instance left alone, no op nobody would run", func(t *testing.T) Input {
			in := input(t, nil, running(spec(t, base)), t0)
			delete(in.Catalog, "local")
			return in
		}, want{phase: events.PhaseDeleting, reason: events.ReasonProviderRemoved, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "unmanaged") || d.Status.InstanceID != "local/x" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"moved off a removed provider: the old instance is left alone, not deleted", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"kvm"}`), running(spec(t, base)), t0)
			delete(in.Catalog, "local")
			return in
		}, want{phase: events.PhaseReplacing, reason: events.ReasonProviderRemoved}},
		{"the provider configured again: the instance is managed again", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.Reason, st.Message = events.PhaseInvalid, events.ReasonProviderRemoved, "provider: ..."
			return input(t, spec(t, base), st, t0.Add(2*time.Minute))
		}, want{phase: events.PhaseRunning, ops: []events.OpKind{events.OpGet}}},
		{"a fixed spec recovers from Invalid", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseInvalid, Reason: events.ReasonUnknownProvider, Message: "provider: ..."}
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"unknown zone is Invalid naming placement.zone", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm","placement":{"zone":"c"}}`), nil, t0)
		}, want{phase: events.PhaseInvalid, reason: events.ReasonInvalidPlacement, check: func(t *testing.T, d Decision) {
			if !strings.HasPrefix(d.Status.Message, "placement.zone:") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"zone picks the host", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm","placement":{"zone":"b"}}`), nil, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].Host != "b" || d.Ops[0].Provider != "kvm" {
				t.Errorf("op %+v", d.Ops[0])
			}
		}}},
		{"missing cloud_init document waits", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","cloudInitRef":"squid"}`), nil, t0)
			in.UserDataErr = errors.New(`cloudInitRef: document "squid" not found in cloud_init`)
			return in
		}, want{phase: events.PhasePending, reason: events.ReasonCloudInitNotFound}},
		{"only one op in flight: a replacement waits for the get", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), withOp(running(spec(t, base)), events.OpGet, t0), t0.Add(time.Second))
		}, want{phase: events.PhaseReplacing, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.Op.ID != "op1" || !d.Wake.Equal(t0.Add(p.OpTimeout)) {
				t.Errorf("op %+v wake %v", d.Status.Op, d.Wake)
			}
		}}},
		{"an op without result is issued again after the op timeout", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			return input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0.Add(p.OpTimeout))
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.Op.ID == "op1" || d.Status.LastError == nil {
				t.Errorf("op %+v lastError %+v", d.Status.Op, d.Status.LastError)
			}
		}}},
		{"a result for another op is ignored", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			in.Result.OpID = "other"
			return in
		}, want{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.InstanceID == "" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a stale create is issued again for the current spec", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassStale, nil)
			return in
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"one read without an address keeps the address", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, want{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.IP == "" || d.Status.AddrMisses != 1 {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"repeated reads without an address drop it", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpGet, t0)
			st.AddrMisses = p.AddrMissLimit - 1
			in := input(t, spec(t, base), st, t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, want{phase: events.PhaseProvisioning, reason: events.ReasonAddressLost, check: func(t *testing.T, d Decision) {
			if d.Status.IP != "" || !d.Status.ProvisionAt.Equal(t0) {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a healthy verdict on the address makes it Ready", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, want{phase: events.PhaseReady, check: func(t *testing.T, d Decision) {
			if !d.Status.ReadyAt.Equal(t0) {
				t.Errorf("readyAt %v", d.Status.ReadyAt)
			}
		}}},
		{"a healthy proxy whose spec says drain is Draining, with no op: drain never replaces", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","drain":true,"pool":"web"}`), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, want{phase: events.PhaseDraining, check: func(t *testing.T, d Decision) {
			if len(d.Ops) != 0 || d.Status.InstanceID != "local/x" {
				t.Errorf("ops %v, status %+v", d.Ops, d.Status)
			}
		}}},
		{"an unhealthy draining proxy is Draining too", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","drain":true}`), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 3, FailureThreshold: 3, SuccessThreshold: 1}
			return in
		}, want{phase: events.PhaseDraining}},
		{"failures past the threshold make it Unhealthy", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 3, FailureThreshold: 3, SuccessThreshold: 1, LastError: "connection refused"}
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseRunning}},
		{"a verdict on an old address counts for nothing", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.9:3128", Healthy: true, ConsecutiveSuccesses: 5, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, want{phase: events.PhaseRunning}},
		{"a healthy external proxy is Ready", func(t *testing.T) Input {
			in := input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5","port":8080}}`), nil, t0)
			in.Health = &events.ProxyHealth{Address: "10.0.0.5:8080", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3,
				LastProbeAt: t0}
			return in
		}, want{phase: events.PhaseReady}},
		{"a verdict from before the address appeared is a predecessor's: Running", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.AddressAt = events.PhaseRunning, t0.Add(-time.Second)
			in := input(t, spec(t, base), st, t0)
			in.Health = &events.ProxyHealth{Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Healthy: true, ConsecutiveSuccesses: 5,
				SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0.Add(-20 * time.Second)}
			return in
		}, want{phase: events.PhaseRunning}},
		{"a status from before addressAt keeps its verdict", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.AddressAt = events.PhaseReady, time.Time{}
			in := input(t, spec(t, base), st, t0)
			in.Health = &events.ProxyHealth{Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Healthy: true, ConsecutiveSuccesses: 5,
				SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0.Add(-20 * time.Second)}
			return in
		}, want{phase: events.PhaseReady}},
		{"a healthy proxy below requireAnonymity is Unhealthy with HeaderLeak naming the headers", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "X-Forwarded-For", "Via")
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak}},
		{"an anonymous proxy meets requireAnonymity anonymous", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityAnonymous, "Via")
			return in
		}, want{phase: events.PhaseReady, reason: "-"}},
		{"a leaking proxy is Ready under the default requireAnonymity none", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "X-Forwarded-For")
			return in
		}, want{phase: events.PhaseReady, reason: "-"}},
		{"fixed config: Ready again without a spec change, the reason cleared", func(t *testing.T) Input {
			st := ready(spec(t, base))
			st.Phase, st.Reason, st.Message = events.PhaseUnhealthy, events.ReasonHeaderLeak, "transparent, requires elite: sites see Via"
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), st, t0)
			in.Health = anonHealth(events.AnonymityElite)
			return in
		}, want{phase: events.PhaseReady, reason: "-", check: func(t *testing.T, d Decision) {
			if d.Status.Message != "" || len(d.Events) != 1 || d.Events[0].Phase != events.PhaseReady {
				t.Errorf("message %q events %+v", d.Status.Message, d.Events)
			}
		}}},
		{"unknown after an echo on one path counts as below: the failed path is named", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = []events.PathCheck{{Path: events.PathConnect, Anonymity: events.AnonymityElite}, {Path: events.PathForward, Error: "403 Forbidden"}}
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
			if want := "anonymity unknown, requires elite: forward: 403 Forbidden"; d.Status.Message != want {
				t.Errorf("message %q, want %q", d.Status.Message, want)
			}
		}}},
		{"a custom check URL gives no echo verdict: fail closed, saying how to fix it", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous","url":"https://example.com/"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = []events.PathCheck{{Path: events.PathConnect}, {Path: events.PathForward}}
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "leave healthCheck.url empty") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a record without paths (no anonymity judged yet) keeps a proxy that requires it Running", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"anonymous"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth("")
			in.Health.Paths = nil
			return in
		}, want{phase: events.PhaseRunning}},
		{"a header leak on an unhealthy proxy: ProbeFailing explains more", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), running(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityTransparent, "Via")
			in.Health.Healthy, in.Health.ConsecutiveFailures, in.Health.LastError = false, 3, "refused"
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing}},
		{"another egress address than expected is a warning: Ready, EgressMismatch, an event", func(t *testing.T) Input {
			in := input(t, spec(t, base), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, want{phase: events.PhaseReady, reason: events.ReasonEgressMismatch, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhaseReady, reason: "-", check: func(t *testing.T, d Decision) {
			if len(d.Events) != 1 || d.Events[0].Reason != "" || d.Events[0].Phase != events.PhaseReady {
				t.Errorf("events %+v", d.Events)
			}
		}}},
		{"an external proxy's egress mismatch replaces ExternalEndpoint", func(t *testing.T) Input {
			in := input(t, spec(t, `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128,"expectedEgress":"192.0.2.1"}}`), nil, t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, want{phase: events.PhaseReady, reason: events.ReasonEgressMismatch}},
		{"a provider error explains more than an egress mismatch", func(t *testing.T) Input {
			st := ready(spec(t, base))
			st.Reason, st.Message = events.ReasonTransient, "backend said transient"
			st.RetryAt = t0.Add(time.Minute)
			in := input(t, spec(t, base), st, t0)
			in.Health = anonHealth(events.AnonymityElite)
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, want{phase: events.PhaseReady, reason: events.ReasonTransient}},
		{"a header leak outranks an egress mismatch", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), ready(spec(t, base)), t0)
			in.Health = anonHealth(events.AnonymityAnonymous, "Via")
			in.Health.EgressIP, in.Health.ExpectedEgress = "198.51.100.7", "192.0.2.1"
			return in
		}, want{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak}},
		{"new credentials are delivered to the running instance, not replaced", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","auth":{"username":"u","password":"new"}}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.AuthHash == "" || d.Status.InstanceID != "local/x" || strings.Contains(d.Status.AuthHash, "new") {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a replacement says why", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, reason: events.ReasonSpecChanged, ops: []events.OpKind{events.OpDelete}}},
		{"changing provider replaces on the old provider", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm"}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].Provider != "local" || d.Status.Teardown != events.ReasonProviderChanged {
				t.Errorf("op %+v", d.Ops[0])
			}
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in(t)
			d := Decide(p, in)
			if tc.want.removed {
				if d.Status != nil {
					t.Fatalf("status kept: %+v", d.Status)
				}
			} else {
				if d.Status == nil {
					t.Fatalf("status removed")
				}
				if d.Status.Phase != tc.want.phase {
					t.Errorf("phase = %s, want %s (reason %s: %s)", d.Status.Phase, tc.want.phase, d.Status.Reason, d.Status.Message)
				}
				if tc.want.reason == "-" && d.Status.Reason != "" {
					t.Errorf("reason = %q (%s), want none", d.Status.Reason, d.Status.Message)
				}
				if tc.want.reason != "" && tc.want.reason != "-" && d.Status.Reason != tc.want.reason {
					t.Errorf("reason = %q, want %q (%s)", d.Status.Reason, tc.want.reason, d.Status.Message)
				}
				if len(d.Ops) > 0 && (d.Status.Op == nil || d.Status.Op.ID != d.Ops[0].ID) {
					t.Errorf("op %+v issued but status records %+v", d.Ops[0], d.Status.Op)
				}
			}
			var kinds []events.OpKind
			for _, op := range d.Ops {
				kinds = append(kinds, op.Kind)
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tc.want.ops) {
				t.Errorf("ops = %v, want %v", kinds, tc.want.ops)
			}
			if len(d.Ops) > 1 {
				t.Errorf("more than one op in flight: %v", kinds)
			}
			if tc.want.check != nil {
				tc.want.check(t, d)
			}
		})
	}
}

func TestDecideIsStableWhenNothingChanges(t *testing.T) {
	st := running(spec(t, `{"provider":"local"}`))
	st.UpdatedAt = t0.Add(-time.Minute)
	d := Decide(DefaultPolicy(), input(t, spec(t, `{"provider":"local"}`), st, t0))
	if !d.Status.UpdatedAt.Equal(st.UpdatedAt) || len(d.Events) != 0 || len(d.Ops) != 0 {
		t.Errorf("unchanged input changed something: %+v %+v", d.Status, d.Events)
	}
}

func TestDecideDoesNotMutateInput(t *testing.T) {
	st := withOp(running(spec(t, `{"provider":"local"}`)), events.OpGet, t0)
	in := input(t, spec(t, `{"provider":"local"}`), st, t0)
	in.Result = result(events.OpGet, events.ClassNotFound, nil)
	before := *st
	before.Op = &events.OpRef{}
	*before.Op = *st.Op
	Decide(DefaultPolicy(), in)
	if st.InstanceID != before.InstanceID || st.Op == nil || *st.Op != *before.Op {
		t.Errorf("input status mutated: %+v", st)
	}
}

func TestRendezvousIsStable(t *testing.T) {
	hosts := []string{"a", "b", "c"}
	moved := 0
	for i := range 300 {
		k := fmt.Sprintf("p%d", i)
		h := rendezvous(k, hosts)
		if h != rendezvous(k, hosts) {
			t.Fatal("not deterministic")
		}
		if h2 := rendezvous(k, []string{"a", "b", "c", "d"}); h2 != h && h2 != "d" {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys moved between old hosts when a host was added", moved)
	}
}

// TestAddressPoll: while an instance has no address it is read again after a quarter of the
// time it has waited since its create began, at least 1 s and at most 10 s, so an address is
// read at most 25% of its own wait late. provisionAt is in status, so any leader continues it.
func TestAddressPoll(t *testing.T) {
	p := DefaultPolicy()
	base := `{"provider":"local"}`
	noAddr := &events.Instance{ID: "local/x", State: "Provisioning"}
	// waiting is a status whose create began waited ago and that has no address yet.
	waiting := func(t *testing.T, waited time.Duration) *events.ProxyStatus {
		st := running(spec(t, base))
		st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-waited)
		return st
	}
	getResult := func(waited time.Duration) func(t *testing.T) Input {
		return func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(waiting(t, waited), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, noAddr)
			return in
		}
	}
	cases := []struct {
		name     string
		policy   func(Policy) Policy
		in       func(t *testing.T) Input
		wantWake time.Duration // from t0
		wantIP   string
	}{
		{"a create that reports no address is read after 1s", nil, func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, Mode: "managed", UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0.Add(-500 * time.Millisecond)}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassNone, noAddr)
			return in
		}, time.Second, ""},
		{"after 3s: still 1s", nil, getResult(3 * time.Second), time.Second, ""},
		{"after 8s: 2s", nil, getResult(8 * time.Second), 2 * time.Second, ""},
		{"after 16s: 4s", nil, getResult(16 * time.Second), 4 * time.Second, ""},
		{"after 30s: 7.5s", nil, getResult(30 * time.Second), 7500 * time.Millisecond, ""},
		{"after 40s: the 10s provisioning poll", nil, getResult(40 * time.Second), 10 * time.Second, ""},
		{"after 10 minutes: still 10s", nil, getResult(10 * time.Minute), 10 * time.Second, ""},
		{"the address appearing starts the drift poll", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(waiting(t, 16*time.Second), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, runningInst)
			return in
		}, 2 * time.Minute, "127.0.0.2"},
		{"a new create starts from 1s again", nil, func(t *testing.T) Input {
			st := waiting(t, 5*time.Minute)
			st.Teardown = events.ReasonSpecChanged
			in := input(t, spec(t, base), withOp(st, events.OpDelete, t0), t0)
			in.Result = result(events.OpDelete, events.ClassNotFound, nil)
			return in
		}, p.OpTimeout, ""}, // the create is in flight; its result is the first case
		{"one miss of a known address keeps the 10s poll (hysteresis)", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, noAddr)
			return in
		}, 10 * time.Second, "127.0.0.2"},
		{"a lost address is waited for like a new one", nil, func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpGet, t0)
			st.AddrMisses = p.AddrMissLimit - 1
			in := input(t, spec(t, base), st, t0)
			in.Result = result(events.OpGet, events.ClassNone, noAddr)
			return in
		}, time.Second, ""},
		{"no first poll set: the fixed provisioning poll", func(p Policy) Policy { p.FirstAddrPoll = 0; return p }, getResult(0), 10 * time.Second, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := p
			if tc.policy != nil {
				pol = tc.policy(p)
			}
			d := Decide(pol, tc.in(t))
			if d.Status == nil {
				t.Fatal("status removed")
			}
			if want := t0.Add(tc.wantWake); !d.Wake.Equal(want) {
				t.Errorf("wake = +%v, want +%v", d.Wake.Sub(t0), tc.wantWake)
			}
			if d.Status.IP != tc.wantIP {
				t.Errorf("ip %q, want %q", d.Status.IP, tc.wantIP)
			}
			if len(d.Ops) > 0 {
				if d.Ops[0].Kind != events.OpCreate || !d.Status.ProvisionAt.Equal(t0) {
					t.Errorf("ops %+v provisionAt %v, want a create begun now", d.Ops, d.Status.ProvisionAt)
				}
				return
			}
			if !d.Status.NextPollAt.Equal(d.Wake) {
				t.Errorf("nextPollAt %v, wake %v: the poll is what wakes it", d.Status.NextPollAt, d.Wake)
			}
			// Deciding again at the wake from the status alone (all a new leader has) reads.
			st := *d.Status
			again := Decide(pol, input(t, spec(t, base), &st, d.Wake))
			if len(again.Ops) != 1 || again.Ops[0].Kind != events.OpGet {
				t.Errorf("at the wake: ops %+v, want one get", again.Ops)
			}
		})
	}
}

// TestAddressIsReadWithinAQuarterOfItsWait walks a create through its reads: whenever the
// address appears, it is read within 25% of the time since the create (or 1 s).
func TestAddressIsReadWithinAQuarterOfItsWait(t *testing.T) {
	p := DefaultPolicy()
	for _, appears := range []time.Duration{300 * time.Millisecond, 2 * time.Second, 7 * time.Second, 17800 * time.Millisecond, 45 * time.Second, 3 * time.Minute} {
		t.Run(appears.String(), func(t *testing.T) {
			sp := spec(t, `{"provider":"local"}`)
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, Mode: "managed", UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			now, reads := t0.Add(200*time.Millisecond), 0 // the create's result
			withOp(st, events.OpCreate, t0)
			kind := events.OpCreate
			for {
				inst := &events.Instance{ID: "local/x", State: "Provisioning"}
				if now.Sub(t0) >= appears {
					inst = runningInst
				}
				in := input(t, sp, st, now)
				in.Result = result(kind, events.ClassNone, inst)
				d := Decide(p, in)
				if d.Status.IP != "" {
					late := now.Sub(t0) - appears
					if limit := max(time.Second, appears/4); late > limit {
						t.Errorf("address of +%v read at +%v: %v late, more than %v", appears, now.Sub(t0), late, limit)
					}
					t.Logf("address of +%v read at +%v after %d reads", appears, now.Sub(t0), reads)
					return
				}
				reads++
				if reads > 100 {
					t.Fatal("never read")
				}
				now = d.Wake
				d = Decide(p, input(t, sp, d.Status, now))
				if len(d.Ops) != 1 || d.Ops[0].Kind != events.OpGet {
					t.Fatalf("at +%v: ops %+v, want a get", now.Sub(t0), d.Ops)
				}
				st, kind = d.Status, events.OpGet
				st.Op.ID = "op1"
			}
		})
	}
}
