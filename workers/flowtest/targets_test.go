package flowtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/provisioner"
)

// checkedFake is the fake provider with a check whose verdict the test sets.
type checkedFake struct {
	*providertest.Fake
	down atomic.Bool
}

func (f *checkedFake) Check(context.Context) []providers.TargetStatus {
	if f.down.Load() {
		return []providers.TargetStatus{{Name: "h1", Reason: providers.CheckUnreachable, Message: "dial tcp: connection refused"}}
	}
	return []providers.TargetStatus{{Name: "h1", Ready: true, Reason: providers.CheckReachable}}
}

// A provider target whose check fails gets no create while it fails: the proxy waits with
// reason ProviderUnhealthy, counted from the provider's own create calls, and is created as
// soon as the check passes again.
func TestFailingTargetGetsNoCreates(t *testing.T) {
	h := newHarness(t)
	fake := &checkedFake{Fake: providertest.NewFake("fake", fakeHost(2))}
	fake.down.Store(true)
	p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: fake, Catalog: fake.Catalog(),
		Installation: installation, Worker: "w1", Buckets: provisioner.BucketsOf(h.connect()), Log: h.log,
		Timings: fastTimings(), Checks: provisioner.Checks{Interval: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(h.ctx, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	h.wg.Go(func() {
		if err := p.Run(h.ctx); err != nil {
			t.Errorf("provisioner: %v", err)
		}
	})
	h.reconciler("r1")

	h.put("p1", `{"provider":"fake"}`)
	h.waitFor("p1 to wait on its failing target", 30*time.Second, func() (bool, string) {
		st, ok := h.status("p1")
		return ok && st.Reason == events.ReasonProviderUnhealthy, string(st.Reason) + " " + st.Message
	})
	// Several checks later (each one written to provider_health), still no create.
	for range 3 {
		rev := h.targetRevision("fake.h1")
		h.waitFor("another check", 30*time.Second, func() (bool, string) { return h.targetRevision("fake.h1") > rev, "" })
	}
	if n := fake.Calls("create"); n != 0 {
		t.Fatalf("%d creates sent to a target that fails its check", n)
	}

	fake.down.Store(false)
	h.waitPhase("p1", events.PhaseRunning)
	if n := fake.Calls("create"); n != 1 {
		t.Errorf("%d creates once the target passed, want 1", n)
	}
}

// targetRevision is the revision of a provider target's check record (0 without one).
func (h *harness) targetRevision(key string) uint64 {
	e, err := h.store.Providers.Get(h.ctx, key)
	if err != nil {
		return 0
	}
	return e.Revision()
}
