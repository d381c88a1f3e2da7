package reconciler

import (
	"fmt"
	"slices"
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
		Catalog: map[string]ProviderInfo{"local": {Hosts: []string{"h1"}, CredentialsInPlace: true}, "kvm": {Hosts: []string{"a", "b"}}},
		NewID:   func() string { n++; return fmt.Sprintf("id%d", n) },
	}
}

// running is the status of a proxy whose instance runs with spec s.
func running(s *schemas.ProxySpec) *events.ProxyStatus {
	return &events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "managed", UID: "u1",
		InstanceName: providers.InstanceName("inst", "u1"), InstanceID: "local/x", Provider: "local", Host: "h1",
		IP: "127.0.0.2", Port: s.Port, SpecHash: s.Hash(nil), SpecRevision: 7, AuthRevision: 7,
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

// base is the smallest spec of a managed proxy.
const base = `{"provider":"local"}`

// decideWant is what Decide must make of a case's input.
type decideWant struct {
	phase   events.Phase
	ops     []events.OpKind
	reason  events.Reason
	removed bool
	check   func(t *testing.T, d Decision)
}

// decideCase is one row of TestDecide: an input and what Decide must make of it.
type decideCase struct {
	name string
	in   func(t *testing.T) Input
	want decideWant
}

func TestDecide(t *testing.T) {
	p := DefaultPolicy()
	cases := slices.Concat(lifecycleCases(p), lifetimeCases(p), configCases(p), healthCases(p), brakeCases(p), rolloutCases(p), successorCases(p))
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
				return // the check may read the ops it wanted
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
