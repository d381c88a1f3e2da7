package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// brakeCases are the rows of TestDecide about replacing Unhealthy instances and the brake.
func brakeCases(p Policy) []decideCase {
	sick := func(t *testing.T, since time.Duration) Input {
		in := input(t, spec(t, base), running(spec(t, base)), t0)
		in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", ConsecutiveFailures: 9, FailureThreshold: 3, SuccessThreshold: 1,
			LastError: "connection refused", LastTransitionAt: t0.Add(-since)}
		return in
	}
	return []decideCase{
		{"an instance Unhealthy for less than replaceAfter is kept, and looked at again then", func(t *testing.T) Input {
			return sick(t, p.ReplaceUnhealthyAfter-time.Minute)
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing, check: func(t *testing.T, d Decision) {
			if d.Wake.After(t0.Add(time.Minute)) {
				t.Errorf("wake %v, want by %v", d.Wake, t0.Add(time.Minute))
			}
		}}},
		{"an instance Unhealthy past replaceAfter is deleted to be created again", func(t *testing.T) Input {
			return sick(t, p.ReplaceUnhealthyAfter)
		}, decideWant{phase: events.PhaseReplacing, ops: []events.OpKind{events.OpDelete}, reason: events.ReasonUnhealthyReplaced, check: func(t *testing.T, d Decision) {
			if d.Status.Teardown != events.ReasonUnhealthyReplaced || !strings.Contains(d.Status.Message, "connection refused") {
				t.Errorf("teardown %q message %q", d.Status.Teardown, d.Status.Message)
			}
		}}},
		{"a Suspect group holds the replacement and says so", func(t *testing.T) Input {
			in := sick(t, 2*p.ReplaceUnhealthyAfter)
			in.Suspect = &events.Suspect{Scope: events.SuspectTarget, Name: "local/h1", Unhealthy: 8, Total: 10}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing, check: func(t *testing.T, d Decision) {
			if d.Status.Suspect.Name != "local/h1" || d.Status.Suspect.Unhealthy != 8 {
				t.Errorf("suspect %+v", d.Status.Suspect)
			}
		}}},
		{"a proxy the brake just let go of gets replaceAfter from then to recover", func(t *testing.T) Input {
			in := sick(t, 2*p.ReplaceUnhealthyAfter)
			in.BrakeReleasedAt = t0.Add(-time.Minute)
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing, check: func(t *testing.T, d Decision) {
			if want := t0.Add(p.ReplaceUnhealthyAfter - time.Minute); d.Wake.After(want) {
				t.Errorf("wake %v, want by %v", d.Wake, want)
			}
		}}},
		{"a record without a transition time never replaces", func(t *testing.T) Input {
			in := sick(t, 0)
			in.Health.LastTransitionAt = time.Time{}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonProbeFailing}},
		{"a header leak is not replaced: a new instance would leak alike", func(t *testing.T) Input {
			in := input(t, spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`), running(spec(t, `{"provider":"local","healthCheck":{"requireAnonymity":"elite"}}`)), t0)
			in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 3, FailureThreshold: 3, SuccessThreshold: 1,
				Anonymity: events.AnonymityTransparent, LeakedHeaders: []string{"Via"}, LastTransitionAt: t0.Add(-24 * time.Hour), LastProbeAt: t0,
				Paths: []events.PathCheck{{Path: "direct", Anonymity: events.AnonymityTransparent}}}
			return in
		}, decideWant{phase: events.PhaseUnhealthy, reason: events.ReasonHeaderLeak}},
	}
}

func unhealthyStatus(provider, host, pool string) *events.ProxyStatus {
	return &events.ProxyStatus{Phase: events.PhaseUnhealthy, Reason: events.ReasonProbeFailing, InstanceID: "i", Provider: provider, Host: host, Pool: pool}
}

func readyStatus(provider, host, pool string) *events.ProxyStatus {
	return &events.ProxyStatus{Phase: events.PhaseReady, InstanceID: "i", Provider: provider, Host: host, Pool: pool}
}

// TestBrakeTally: a group is Suspect past the share and the minimum, flips once per change,
// and a replacement in flight still counts as Unhealthy.
func TestBrakeTally(t *testing.T) {
	b := newBrakeTally(Brake{Share: 50, Minimum: 3})
	b.now = func() time.Time { return t0 }
	for i := range 6 {
		b.set(fmt.Sprintf("ok-%c", rune('a'+i)), readyStatus("p", "h1", "web"))
	}
	for i := range 6 {
		b.set(fmt.Sprintf("bad-%c", rune('a'+i)), unhealthyStatus("p", "h1", ""))
	}
	if s := b.held("p", "h1", ""); s != nil {
		t.Fatalf("6 of 12 is not over 50%%, got %+v", s)
	}
	b.set("bad-g", unhealthyStatus("p", "h1", ""))
	s := b.held("p", "h1", "web")
	if s == nil || s.Scope != events.SuspectTarget || s.Unhealthy != 7 || s.Total != 13 {
		t.Fatalf("7 of 13 must hold the target, got %+v", s)
	}
	flips := b.takeFlips()
	if len(flips) != 1 || !flips[0].suspect || len(flips[0].sick) != 7 {
		t.Fatalf("flips %+v", flips)
	}
	if ev := flips[0].event(t0); ev.Kind != events.KindProvider || ev.Reason != events.ReasonSuspect || ev.Proxy != "p/h1" {
		t.Errorf("event %+v", ev)
	}
	// A replacement for health in flight still counts.
	st := unhealthyStatus("p", "h1", "")
	st.Phase, st.Teardown = events.PhaseReplacing, events.ReasonUnhealthyReplaced
	b.set("bad-a", st)
	if b.held("p", "h1", "") == nil || len(b.takeFlips()) != 0 {
		t.Fatal("a replacement for health must not release the brake")
	}
	for _, n := range []string{"bad-a", "bad-b", "bad-c"} {
		b.set(n, nil)
	}
	if b.held("p", "h1", "") != nil {
		t.Fatal("4 of 10 must release it")
	}
	if b.releasedAt("p", "h1", "") != t0 || !b.releasedAt("p", "h2", "").IsZero() {
		t.Errorf("released at %v", b.releasedAt("p", "h1", ""))
	}
	flips = b.takeFlips()
	if len(flips) != 1 || flips[0].suspect || flips[0].event(t0).Reason != events.ReasonSuspectCleared {
		t.Fatalf("flips %+v", flips)
	}
	// The minimum: two of two Unhealthy on another target hold nothing.
	b.set("x", unhealthyStatus("p", "h2", ""))
	b.set("y", unhealthyStatus("p", "h2", ""))
	if b.held("p", "h2", "") != nil {
		t.Error("below the minimum the brake must not hold")
	}
}

// TestBrakeTallyPools: a pool is its own group, across targets.
func TestBrakeTallyPools(t *testing.T) {
	b := newBrakeTally(Brake{Share: 50, Minimum: 3})
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		b.set("m"+h, unhealthyStatus("p", h, "web"))
		b.set("o"+h, readyStatus("p", h, ""))
		b.set("o2"+h, readyStatus("p", h, ""))
	}
	s := b.held("p", "h1", "web")
	if s == nil || s.Scope != events.SuspectPool || s.Name != "web" || s.Unhealthy != 4 || s.Total != 4 {
		t.Fatalf("pool web must be Suspect, got %+v", s)
	}
	if b.held("p", "h1", "") != nil {
		t.Error("a proxy in no pool on a target with 1 of 3 Unhealthy is not held")
	}
	flips := b.takeFlips()
	if len(flips) != 1 || flips[0].event(t0).Kind != events.KindPool || !slices.Contains(flips[0].sick, "mh1") {
		t.Errorf("flips %+v", flips)
	}
}

// TestDecideClearsSuspectOffUnhealthy: the mark never outlives the phase it explains.
func TestDecideClearsSuspectOffUnhealthy(t *testing.T) {
	st := running(spec(t, base))
	st.Suspect = events.Suspect{Scope: events.SuspectTarget, Name: "local/h1", Unhealthy: 3, Total: 3}
	in := input(t, spec(t, base), st, t0)
	in.Health = &events.ProxyHealth{Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3}
	d := Decide(DefaultPolicy(), in)
	if d.Status.Phase != events.PhaseReady || d.Status.Suspect != (events.Suspect{}) {
		t.Errorf("phase %s suspect %+v", d.Status.Phase, d.Status.Suspect)
	}
}
