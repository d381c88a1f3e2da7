package reconciler

import (
	"errors"
	"fmt"
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

func withOp(st *events.ProxyStatus, kind events.OpKind, at time.Time) *events.ProxyStatus {
	st.Op = &events.OpRef{Kind: kind, ID: "op1", Host: "h1", IssuedAt: at}
	return st
}

func result(kind events.OpKind, class string, inst *events.Instance) *events.OpResult {
	r := &events.OpResult{V: 1, OpID: "op1", Kind: kind, Proxy: "p1", Final: true, Instance: inst, ErrorClass: class, At: t0}
	if class != "" {
		r.Error = "backend said " + class
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
		reason  string
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
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: ReasonCreating, check: func(t *testing.T, d Decision) {
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
			in.Result = result(events.OpCreate, "", runningInst)
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
			in.Result = result(events.OpGet, "", &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, want{phase: events.PhaseProvisioning, reason: ReasonWaitingForAddress, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.FirstAddrPoll)) || d.Status.AddrPolls != 1 {
				t.Errorf("wake = %v, addrPolls %d, want +1s and 1", d.Wake, d.Status.AddrPolls)
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
			if d.Status.Teardown != ReasonSpecChanged || d.Ops[0].InstanceID != "local/x" {
				t.Errorf("teardown %q op %+v", d.Status.Teardown, d.Ops[0])
			}
		}}},
		{"attribute, lease and health changes do not replace", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","attributes":{"geo":"de"},"maxLeases":5,"healthCheck":{"intervalSeconds":10}}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseRunning}},
		{"replacement waits for delete, then creates under the same name", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = ReasonSpecChanged
			in := input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
			in.Result = result(events.OpDelete, "NotFound", nil)
			return in
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].InstanceName != providers.InstanceName("inst", "u1") || d.Status.Teardown != "" {
				t.Errorf("op %+v teardown %q", d.Ops[0], d.Status.Teardown)
			}
		}}},
		{"a delete that has not finished is repeated after the deletion poll", func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpDelete, t0)
			st.Teardown = ReasonSpecChanged
			in := input(t, spec(t, `{"provider":"local","port":8080}`), st, t0)
			in.Result = result(events.OpDelete, "", &events.Instance{ID: "local/x", State: "Running", Address: "127.0.0.2"})
			return in
		}, want{phase: events.PhaseReplacing, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(p.DeletionPoll)) {
				t.Errorf("wake = %v", d.Wake)
			}
		}}},
		{"stopped instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", &events.Instance{ID: "local/x", State: "Stopped"})
			return in
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceStopped"}},
		{"terminated instance is deleted and recreated", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", &events.Instance{ID: "local/x", State: "Terminated"})
			return in
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: "InstanceTerminated"}},
		{"vanished instance is created again", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "NotFound", nil)
			return in
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: ReasonCreating}},
		{"quota waits five minutes", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, "Quota", nil)
			return in
		}, want{phase: events.PhaseWaiting, reason: ReasonQuota, check: func(t *testing.T, d Decision) {
			if !d.Status.RetryAt.Equal(t0.Add(5*time.Minute)) || d.Status.LastError == nil {
				t.Errorf("retryAt %v lastError %+v", d.Status.RetryAt, d.Status.LastError)
			}
		}}},
		{"quota retries after the wait", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseWaiting, UID: "u1", Provider: "local", Host: "h1",
				ProvisionAt: t0, Reason: ReasonQuota, RetryAt: t0.Add(5 * time.Minute)}
			return input(t, spec(t, base), st, t0.Add(5*time.Minute))
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"transient failure backs off with the error visible", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0, Failures: 2}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, "Transient", nil)
			return in
		}, want{phase: events.PhaseProvisioning, reason: ReasonTransient, check: func(t *testing.T, d Decision) {
			if d.Status.Failures != 3 || !d.Status.RetryAt.Equal(t0.Add(4*p.BackoffBase)) {
				t.Errorf("failures %d retryAt %v", d.Status.Failures, d.Status.RetryAt)
			}
			if d.Status.LastError == nil || d.Status.LastError.Class != "Transient" || !strings.Contains(d.Status.Message, "backend said") {
				t.Errorf("lastError %+v message %q", d.Status.LastError, d.Status.Message)
			}
		}}},
		{"a retried op shows its error and keeps the op in flight", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, "Transient", nil)
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
			in.Result = result(events.OpCreate, "Permanent", nil)
			return in
		}, want{phase: events.PhaseFailed, reason: ReasonPermanent}},
		{"Failed stays latched for the same revision", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 7, Reason: ReasonPermanent}
			return input(t, spec(t, base), st, t0.Add(time.Hour))
		}, want{phase: events.PhaseFailed, reason: ReasonPermanent}},
		{"a new spec revision unlatches Failed", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, UID: "u1", Provider: "local", Host: "h1", SpecRevision: 6, Reason: ReasonPermanent}
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"a missed provisioning deadline recreates", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline)
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: ReasonDeadline, check: func(t *testing.T, d Decision) {
			if d.Status.Deadlines != 1 {
				t.Errorf("deadlines = %d", d.Status.Deadlines)
			}
		}}},
		{"the third missed deadline fails", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.IP, st.Phase, st.ProvisionAt, st.Deadlines = "", events.PhaseProvisioning, t0.Add(-p.ProvisionDeadline), 2
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseFailed, reason: ReasonDeadline}},
		{"external proxies make no provider calls", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"10.0.0.5","port":8080}}`), nil, t0)
		}, want{phase: events.PhaseRunning, reason: ReasonExternal, check: func(t *testing.T, d Decision) {
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
			st.Teardown = ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, "", nil)
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
			st.Teardown = ReasonProxyDeleted
			in := input(t, nil, st, t0)
			in.Result = result(events.OpDelete, "Permanent", nil)
			return in
		}, want{phase: events.PhaseDeleting, reason: ReasonTransient}},
		{"invalid spec: Invalid naming the problem, nothing done", func(t *testing.T) Input {
			in := input(t, nil, running(spec(t, base)), t0)
			in.SpecErr = errors.New("port: must be between 1 and 65535, got 0")
			return in
		}, want{phase: events.PhaseInvalid, reason: ReasonInvalidSpec, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "port") || d.Status.InstanceID != "local/x" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"unknown provider is Invalid", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"nope"}`), nil, t0)
		}, want{phase: events.PhaseInvalid, reason: ReasonUnknownProvider, check: func(t *testing.T, d Decision) {
			if !strings.HasPrefix(d.Status.Message, "provider:") || !strings.Contains(d.Status.Message, "local") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a fixed spec recovers from Invalid", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseInvalid, Reason: ReasonUnknownProvider, Message: "provider: ..."}
			return input(t, spec(t, base), st, t0)
		}, want{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: ReasonCreating}},
		{"unknown zone is Invalid naming placement.zone", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm","placement":{"zone":"c"}}`), nil, t0)
		}, want{phase: events.PhaseInvalid, reason: ReasonInvalidPlacement, check: func(t *testing.T, d Decision) {
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
		}, want{phase: events.PhasePending, reason: ReasonCloudInitNotFound}},
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
			in.Result = result(events.OpGet, "NotFound", nil)
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
			in.Result = result(events.OpGet, "", &events.Instance{ID: "local/x", State: "Provisioning"})
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
			in.Result = result(events.OpGet, "", &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, want{phase: events.PhaseProvisioning, reason: ReasonAddressLost, check: func(t *testing.T, d Decision) {
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
		{"failures past the threshold make it Unhealthy", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 3, FailureThreshold: 3, SuccessThreshold: 1, LastError: "connection refused"}
			return in
		}, want{phase: events.PhaseUnhealthy, reason: ReasonProbeFailing, check: func(t *testing.T, d Decision) {
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
			in.Health = &events.ProxyHealth{Address: "10.0.0.5:8080", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
			return in
		}, want{phase: events.PhaseReady}},
		{"new credentials are delivered to the running instance, not replaced", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","auth":{"username":"u","password":"new"}}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseRunning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.AuthHash == "" || d.Status.InstanceID != "local/x" || strings.Contains(d.Status.AuthHash, "new") {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a replacement says why", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, reason: ReasonSpecChanged, ops: []events.OpKind{events.OpDelete}}},
		{"changing provider replaces on the old provider", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm"}`), running(spec(t, base)), t0)
		}, want{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].Provider != "local" || d.Status.Teardown != ReasonProviderChanged {
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
				if tc.want.reason != "" && d.Status.Reason != tc.want.reason {
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
	in.Result = result(events.OpGet, "NotFound", nil)
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

// TestAddressPollBacksOff: while an instance has no address it is read again after 1 s, then
// 2, 4, 8 and 10 s; the count lives in status, so any leader continues it.
func TestAddressPollBacksOff(t *testing.T) {
	p := DefaultPolicy()
	base := `{"provider":"local"}`
	noAddr := &events.Instance{ID: "local/x", State: "Provisioning"}
	// provisioning is a status waiting for an address after polls reads without one.
	provisioning := func(t *testing.T, polls int) *events.ProxyStatus {
		st := running(spec(t, base))
		st.IP, st.Phase, st.ProvisionAt, st.AddrPolls = "", events.PhaseProvisioning, t0.Add(-time.Minute), polls
		return st
	}
	cases := []struct {
		name      string
		policy    func(Policy) Policy
		in        func(t *testing.T) Input
		wantWake  time.Duration // from t0
		wantPolls int
		wantIP    string
	}{
		{"a create that reports no address is read after 1s", nil, func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, Mode: "managed", UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, "", noAddr)
			return in
		}, time.Second, 1, ""},
		{"second read without an address: 2s", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 1), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 2 * time.Second, 2, ""},
		{"third: 4s", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 2), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 4 * time.Second, 3, ""},
		{"fourth: 8s", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 3), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 8 * time.Second, 4, ""},
		{"fifth and later: capped at the provisioning poll", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 4), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 10 * time.Second, 5, ""},
		{"a large count stays capped", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 80), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 10 * time.Second, 81, ""},
		{"the address appearing resets the count and starts the drift poll", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 3), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", runningInst)
			return in
		}, 2 * time.Minute, 0, "127.0.0.2"},
		{"a new create resets the count", nil, func(t *testing.T) Input {
			st := provisioning(t, 4)
			st.Teardown = ReasonSpecChanged
			in := input(t, spec(t, base), withOp(st, events.OpDelete, t0), t0)
			in.Result = result(events.OpDelete, "NotFound", nil)
			return in
		}, p.OpTimeout, 0, ""},
		{"one miss of a known address keeps the 10s poll (hysteresis)", nil, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 10 * time.Second, 0, "127.0.0.2"},
		{"a lost address is waited for like a new one", nil, func(t *testing.T) Input {
			st := withOp(running(spec(t, base)), events.OpGet, t0)
			st.AddrMisses = p.AddrMissLimit - 1
			in := input(t, spec(t, base), st, t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, time.Second, 1, ""},
		{"no first poll set: fixed provisioning poll", func(p Policy) Policy { p.FirstAddrPoll = 0; return p }, func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(provisioning(t, 0), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, "", noAddr)
			return in
		}, 10 * time.Second, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := p
			if tc.policy != nil {
				pol = tc.policy(p)
			}
			in := tc.in(t)
			d := Decide(pol, in)
			if d.Status == nil {
				t.Fatal("status removed")
			}
			if want := t0.Add(tc.wantWake); !d.Wake.Equal(want) {
				t.Errorf("wake = +%v, want +%v", d.Wake.Sub(t0), tc.wantWake)
			}
			if d.Status.AddrPolls != tc.wantPolls || d.Status.IP != tc.wantIP {
				t.Errorf("addrPolls %d ip %q, want %d %q", d.Status.AddrPolls, d.Status.IP, tc.wantPolls, tc.wantIP)
			}
			if len(d.Ops) == 0 && !d.Status.NextPollAt.Equal(d.Wake) {
				t.Errorf("nextPollAt %v, wake %v: the poll is what wakes it", d.Status.NextPollAt, d.Wake)
			}
			// Deciding again at the wake issues the read, from the status alone (a new leader
			// has nothing else).
			if len(d.Ops) == 0 {
				st := *d.Status
				again := Decide(pol, input(t, spec(t, base), &st, d.Wake))
				if len(again.Ops) != 1 || again.Ops[0].Kind != events.OpGet {
					t.Errorf("at the wake: ops %+v, want one get", again.Ops)
				}
			}
		})
	}
}
