package reconciler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
)

// configCases are the rows of TestDecide about specs the reconciler refuses, providers and zones, one op in flight, addresses.
func configCases(p Policy) []decideCase {
	return []decideCase{
		{"invalid spec: Invalid naming the problem, nothing done", func(t *testing.T) Input {
			in := input(t, nil, running(spec(t, base)), t0)
			in.SpecErr = errors.New("port: must be between 1 and 65535, got 0")
			return in
		}, decideWant{phase: events.PhaseInvalid, reason: events.ReasonInvalidSpec, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "port") || d.Status.InstanceID != "local/x" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"unknown provider is Invalid", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"nope"}`), nil, t0)
		}, decideWant{phase: events.PhaseInvalid, reason: events.ReasonUnknownProvider, check: func(t *testing.T, d Decision) {
			if !strings.HasPrefix(d.Status.Message, "provider:") || !strings.Contains(d.Status.Message, "local") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a removed provider: Invalid naming provider, its instance left alone", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			delete(in.Catalog, "local")
			return in
		}, decideWant{phase: events.PhaseInvalid, reason: events.ReasonProviderRemoved, check: func(t *testing.T, d Decision) {
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
		}, decideWant{phase: events.PhaseDeleting, reason: events.ReasonProviderRemoved, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "unmanaged") || d.Status.InstanceID != "local/x" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"moved off a removed provider: the old instance is left alone, not deleted", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"kvm"}`), running(spec(t, base)), t0)
			delete(in.Catalog, "local")
			return in
		}, decideWant{phase: events.PhaseReplacing, reason: events.ReasonProviderRemoved}},
		{"the provider configured again: the instance is managed again", func(t *testing.T) Input {
			st := running(spec(t, base))
			st.Phase, st.Reason, st.Message = events.PhaseInvalid, events.ReasonProviderRemoved, "provider: ..."
			return input(t, spec(t, base), st, t0.Add(2*time.Minute))
		}, decideWant{phase: events.PhaseRunning, ops: []events.OpKind{events.OpGet}}},
		{"a fixed spec recovers from Invalid", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseInvalid, Reason: events.ReasonUnknownProvider, Message: "provider: ..."}
			return input(t, spec(t, base), st, t0)
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"unknown zone is Invalid naming placement.zone", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm","placement":{"zone":"c"}}`), nil, t0)
		}, decideWant{phase: events.PhaseInvalid, reason: events.ReasonInvalidPlacement, check: func(t *testing.T, d Decision) {
			if !strings.HasPrefix(d.Status.Message, "placement.zone:") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"zone picks the host", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"kvm","placement":{"zone":"b"}}`), nil, t0)
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Ops[0].Host != "b" || d.Ops[0].Provider != "kvm" {
				t.Errorf("op %+v", d.Ops[0])
			}
		}}},
		{"a failing provider target gets no create: the proxy waits, saying why", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"kvm","placement":{"zone":"b"}}`), nil, t0)
			in.Targets = map[string]TargetCheck{"b": {Reason: "Unreachable", Message: "dial tcp: refused", CheckedAt: t0.Add(-time.Minute)}}
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonProviderUnhealthy, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "b of kvm fails its check (Unreachable: dial tcp: refused)") {
				t.Errorf("message %q", d.Status.Message)
			}
			if !d.Wake.Equal(t0.Add(-time.Minute).Add(p.TargetCheckStale)) {
				t.Errorf("wake %v, want when the check grows stale", d.Wake)
			}
		}}},
		{"a proxy placed by rendezvous goes to a healthy target", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"kvm"}`), nil, t0)
			in.Targets = map[string]TargetCheck{rendezvous("p1", []string{"a", "b"}): {CheckedAt: t0}}
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if down := rendezvous("p1", []string{"a", "b"}); d.Ops[0].Host == down {
				t.Errorf("created on %s, whose check fails", down)
			}
		}}},
		{"a stale failing check holds nothing back", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"kvm","placement":{"zone":"b"}}`), nil, t0)
			in.Targets = map[string]TargetCheck{"b": {Reason: "Unreachable", CheckedAt: t0.Add(-p.TargetCheckStale)}}
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"a running instance on a failing target is left alone", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Targets = map[string]TargetCheck{"h1": {Reason: "Unreachable", CheckedAt: t0}}
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"a create waits while the provider's create-rate limit is used up", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.CreateAt = t0.Add(7 * time.Second)
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonRateLimited, check: func(t *testing.T, d Decision) {
			if !d.Wake.Equal(t0.Add(7*time.Second)) || !strings.Contains(d.Status.Message, "create-rate limit of provider local") {
				t.Errorf("wake %v, message %q", d.Wake, d.Status.Message)
			}
		}}},
		{"a create goes once the create-rate limit lets it", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.CreateAt = t0
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, reason: events.ReasonCreating}},
		{"a new instance that would pass maxInstances waits, saying how full the provider is", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.Limit = &InstanceLimit{Max: 3, Count: 3}
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonLimitReached, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "provider local has 3 of its 3 instances (maxInstances)") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"room taken by older waiting proxies: a newer one waits its turn", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.Limit = &InstanceLimit{Max: 3, Count: 2, Ahead: 1}
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonLimitReached, check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Status.Message, "1 declared before this one wait ahead of it") {
				t.Errorf("message %q", d.Status.Message)
			}
		}}},
		{"a full target holds a new instance back", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.Limit = &InstanceLimit{PerTarget: 2, TargetCount: map[string]int{"h1": 2}}
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonLimitReached}},
		{"with room, the create goes", func(t *testing.T) Input {
			in := input(t, spec(t, base), nil, t0)
			in.Limit = &InstanceLimit{Max: 3, Count: 2, PerTarget: 2, TargetCount: map[string]int{"h1": 1}}
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		{"an instance that may exist is never held by a limit", func(t *testing.T) Input {
			in := input(t, spec(t, base), running(spec(t, base)), t0)
			in.Limit = &InstanceLimit{Max: 1, Count: 5}
			return in
		}, decideWant{phase: events.PhaseRunning}},
		{"missing cloud_init document waits", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","cloudInitRef":"squid"}`), nil, t0)
			in.UserDataErr = errors.New(`cloudInitRef: document "squid" not found in cloud_init`)
			return in
		}, decideWant{phase: events.PhasePending, reason: events.ReasonCloudInitNotFound}},
		{"only one op in flight: a successor waits for the get", func(t *testing.T) Input {
			return input(t, spec(t, `{"provider":"local","port":8080}`), withOp(drainedLongAgo(running(spec(t, base))), events.OpGet, t0), t0.Add(time.Second))
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.Op.ID != "op1" || !d.Wake.Equal(t0.Add(p.OpTimeout)) {
				t.Errorf("op %+v wake %v", d.Status.Op, d.Wake)
			}
		}}},
		{"an op without result is issued again after the op timeout", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			return input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0.Add(p.OpTimeout))
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			if d.Status.Op.ID == "op1" || d.Status.LastError == nil {
				t.Errorf("op %+v lastError %+v", d.Status.Op, d.Status.LastError)
			}
		}}},
		{"a result for another op is ignored", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNotFound, nil)
			in.Result.OpID = "other"
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
			if d.Status.Op == nil || d.Status.InstanceID == "" {
				t.Errorf("status %+v", d.Status)
			}
		}}},
		{"a stale create is issued again for the current spec", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0}
			in := input(t, spec(t, base), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassStale, nil)
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}}},
		// A create that ran, its result lost with a killed provisioner, then the spec edited:
		// the redelivered create is stale. The instance it built must not be adopted by a
		// create of the new spec under its name; it is rolled, the successor under a new one.
		{"a stale create after a spec edit is rolled under a new name, never adopted", func(t *testing.T) Input {
			st := &events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, UID: "u1", Provider: "local", Host: "h1", ProvisionAt: t0,
				InstanceName: providers.InstanceName("inst", "u1"), SpecHash: spec(t, base).Hash(nil), Generation: "g1"}
			in := input(t, spec(t, `{"provider":"local","port":9090}`), withOp(st, events.OpCreate, t0), t0)
			in.Result = result(events.OpCreate, events.ClassStale, nil)
			in.Rollout = RolloutBudget{MaxUnavailable: 1}
			return in
		}, decideWant{phase: events.PhaseProvisioning, ops: []events.OpKind{events.OpCreate}, check: func(t *testing.T, d Decision) {
			st := d.Status
			if st.Rollout == nil || st.Rollout.Reason != events.ReasonSpecChanged || st.Successor == nil {
				t.Fatalf("not rolled: rollout %+v successor %+v", st.Rollout, st.Successor)
			}
			if op := d.Ops[0]; op.InstanceName == st.InstanceName || op.InstanceName != st.Successor.Name {
				t.Errorf("create for %s, want the successor %s (never the name of the instance built from the old spec)", op.InstanceName, st.Successor.Name)
			}
		}}},
		{"one read without an address keeps the address", func(t *testing.T) Input {
			in := input(t, spec(t, base), withOp(running(spec(t, base)), events.OpGet, t0), t0)
			in.Result = result(events.OpGet, events.ClassNone, &events.Instance{ID: "local/x", State: "Provisioning"})
			return in
		}, decideWant{phase: events.PhaseRunning, check: func(t *testing.T, d Decision) {
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
		}, decideWant{phase: events.PhaseProvisioning, reason: events.ReasonAddressLost, check: func(t *testing.T, d Decision) {
			if d.Status.IP != "" || !d.Status.ProvisionAt.Equal(t0) {
				t.Errorf("status %+v", d.Status)
			}
		}}},
	}
}
