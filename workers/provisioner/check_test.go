package provisioner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/provisioner"
)

// hanging is a provider whose Check never returns until the test ends, ignoring its context.
type hanging struct {
	*providertest.Fake
	release chan struct{}
}

func (h hanging) Check(ctx context.Context) []providers.TargetStatus {
	<-h.release
	return nil
}

// answering reports its one target with a verdict the test flips.
type answering struct {
	*providertest.Fake
	ready chan bool
}

func (a answering) Check(ctx context.Context) []providers.TargetStatus {
	var r bool
	select {
	case r = <-a.ready:
	case <-ctx.Done():
		return nil
	}
	reason := providers.CheckUnreachable
	if r {
		reason = providers.CheckReachable
	}
	return []providers.TargetStatus{{Name: "h1", Address: "10.0.0.1:22", Ready: r, Reason: reason,
		Message: strings.Repeat("x", 3000), Latency: 3 * time.Millisecond, Details: map[string]string{"version": "1"}}}
}

func target(t *testing.T, r *rig) (events.TargetHealth, bool) {
	var th events.TargetHealth
	_, err := kvstore.GetJSON(context.Background(), r.store.Providers, "fake.h1", &th)
	return th, err == nil
}

func waitTarget(t *testing.T, r *rig, what string, cond func(events.TargetHealth) bool) events.TargetHealth {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if th, ok := target(t, r); ok && cond(th) {
			return th
		}
		time.Sleep(50 * time.Millisecond)
	}
	th, _ := target(t, r)
	t.Fatalf("timed out waiting for %s; last %+v", what, th)
	return th
}

// A check that hangs is reported as Timeout within the round's timeout and does not delay ops.
func TestHungCheckIsATimeoutAndOpsGoOn(t *testing.T) {
	release := make(chan struct{})
	fake := providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2})
	r := newRigWith(t, hanging{fake, release}, provisioner.Checks{Interval: time.Second})
	t.Cleanup(func() { close(release) })
	r.fake = fake
	start := time.Now()
	th := waitTarget(t, r, "a Timeout verdict", func(th events.TargetHealth) bool { return th.Reason == "Timeout" })
	if th.Ready {
		t.Fatal("a timed-out target reported ready")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Timeout reported after %s; the round timeout is 1s", took)
	}
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	if res := r.result(); res.ErrorClass != events.ClassNone {
		t.Fatalf("op during a hung check: %+v", res)
	}
}

// Verdicts are recorded with the message capped at 1024 characters; lastTransitionTime moves
// only when ready flips, and each flip is an event.
func TestCheckVerdicts(t *testing.T) {
	fake := providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2})
	ready := make(chan bool)
	r := newRigWith(t, answering{fake, ready}, provisioner.Checks{Interval: time.Second})
	r.fake = fake
	sub, err := r.nc.SubscribeSync(events.EventSubject(events.KindProvider, "fake"))
	if err != nil {
		t.Fatal(err)
	}
	ready <- true
	first := waitTarget(t, r, "ready", func(th events.TargetHealth) bool { return th.Ready })
	if len(first.Message) != 1024 || first.Details["version"] != "1" || first.Address != "10.0.0.1:22" {
		t.Fatalf("record %+v", first)
	}
	ready <- true
	again := waitTarget(t, r, "a second check", func(th events.TargetHealth) bool { return th.CheckedAt.After(first.CheckedAt) })
	if !again.LastTransitionTime.Equal(first.LastTransitionTime) {
		t.Fatal("lastTransitionTime moved without a flip")
	}
	ready <- false
	down := waitTarget(t, r, "not ready", func(th events.TargetHealth) bool { return !th.Ready })
	if !down.LastTransitionTime.After(first.LastTransitionTime) || down.Reason != "Unreachable" {
		t.Fatalf("flip not recorded: %+v", down)
	}
	for _, want := range []bool{true, false} {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("transition event: %v", err)
		}
		if got := strings.Contains(string(m.Data), `"ready":true`); got != want {
			t.Fatalf("event %s, want ready=%v", m.Data, want)
		}
	}
}
