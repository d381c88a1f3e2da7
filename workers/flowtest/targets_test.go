package flowtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
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
	h.startProvisioner(provisioner.Config{Provider: "fake", Backend: fake, Catalog: fake.Catalog(), Worker: "w1", Checks: provisioner.Checks{Interval: 200 * time.Millisecond}})
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

// A provider's create-rate limit holds: proxies put at once are created no faster than the
// limit allows (counted from the provider's own create calls, against the time since before
// the first put, which only loosens the bound), the waiting ones say RateLimited, and creates
// go on at the rate. At one a second all twelve are made; at the 6 a minute, twenty
// are watched until three are made (a burst of one, then one each 10 s).
func TestCreateRateLimit(t *testing.T) {
	for _, c := range []struct {
		perMinute, burst, n, until int
	}{{60, 3, 12, 12}, {6, 1, 20, 3}} {
		t.Run(fmt.Sprintf("%d per minute", c.perMinute), func(t *testing.T) {
			h := newHarness(t)
			fake := providertest.NewFake("fake", fakeHost(8))
			var mu sync.Mutex
			var sent []string // each create call, "proxy@seconds since start", to explain a failure
			var start time.Time
			fake.OnCall = func(op, name string) {
				if op == "create" {
					mu.Lock()
					sent = append(sent, fmt.Sprintf("%s@%.3f", name, time.Since(start).Seconds()))
					mu.Unlock()
				}
			}
			cat := fake.Catalog()
			cat.Limits = map[string]int{events.LimitCreatesPerMinute: c.perMinute, events.LimitCreateBurst: c.burst}
			h.startProvisioner(provisioner.Config{Provider: "fake", Backend: fake, Catalog: cat, Worker: "w1"})
			mu.Lock()
			start = time.Now()
			mu.Unlock()
			h.reconciler("r1")
			for i := range c.n {
				h.put(fmt.Sprintf("p%02d", i), `{"provider":"fake"}`)
			}
			sawLimited := false
			h.waitFor(fmt.Sprintf("%d proxies created", c.until), 90*time.Second, func() (bool, string) {
				calls := fake.Calls("create")
				allowed := c.burst + int(time.Since(start).Seconds()*float64(c.perMinute)/60) // read after the calls: looser
				if calls > allowed {
					mu.Lock()
					seen := slices.Clone(sent)
					mu.Unlock()
					t.Fatalf("%d creates %v after the start, the limit allows %d: %v", calls, time.Since(start).Round(time.Millisecond), allowed, seen)
				}
				for i := range c.n {
					if st, ok := h.status(fmt.Sprintf("p%02d", i)); ok && st.Reason == events.ReasonRateLimited {
						sawLimited = true
					}
				}
				return calls >= c.until, fmt.Sprintf("%d of %d created", calls, c.n)
			})
			if !sawLimited {
				t.Error("no waiting proxy said RateLimited")
			}
		})
	}
}

// maxInstances fails closed: eight proxies on a provider limited to three never have more
// than three instances at any observation, counted from the provider itself, while the
// leading reconciler is killed twice (kill -9 as NATS sees it) and another takes over; the
// five others say LimitReached; raising the limit to eight creates the rest.
func TestInstanceLimitHoldsAcrossTakeovers(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(8))
	cat := fake.Catalog()
	cat.Limits = map[string]int{events.LimitMaxInstances: 3}
	h.startProvisioner(provisioner.Config{Provider: "fake", Backend: fake, Catalog: cat, Worker: "w1"})
	const n = 8
	most := 0
	var raised atomic.Bool // once set, the limit is eight
	observe := func() int {
		insts, err := fake.List(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if most = max(most, len(insts)); len(insts) > 3 && !raised.Load() {
			t.Fatalf("%d instances on a provider limited to 3", len(insts))
		}
		return len(insts)
	}
	waiting := func() int {
		k := 0
		for i := range n {
			if st, ok := h.status(fmt.Sprintf("p%d", i)); ok && st.Reason == events.ReasonLimitReached {
				k++
			}
		}
		return k
	}
	procs := []*reconcilerProc{h.startReconciler("r1"), h.startReconciler("r2")}
	// Put last to first: the first made are then the last by name, so a new leader that
	// decided its waiting proxies (p0…) before counting what exists would overrun the limit.
	for i := n - 1; i >= 0; i-- {
		h.put(fmt.Sprintf("p%d", i), `{"provider":"fake"}`)
	}
	for kill := range 2 {
		h.waitFor("three instances and five proxies waiting", 60*time.Second, func() (bool, string) {
			got, w := observe(), waiting()
			return got == 3 && w == n-3, fmt.Sprintf("%d instances, %d waiting", got, w)
		})
		procs[0].kill() // the first started leads, or took over from the one killed before
		procs = append(procs[1:], h.startReconciler(fmt.Sprintf("r%d", 3+kill)))
		// A leader's whole term, observed: the new one must count what the old one made.
		deadline := time.Now().Add(2 * leaderTTL)
		for time.Now().Before(deadline) {
			observe()
			time.Sleep(20 * time.Millisecond)
		}
	}
	raised.Store(true)
	cat.Limits[events.LimitMaxInstances] = 8
	raise, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: fake, Catalog: cat,
		Installation: installation, Worker: "w2", Buckets: provisioner.BucketsOf(h.connect()), Log: h.log, Timings: fastTimings()})
	if err != nil {
		t.Fatal(err)
	}
	if err := raise.PublishCatalog(h.ctx); err != nil { // as a provisioner restarted with the new config
		t.Fatal(err)
	}
	h.waitFor("every proxy created once the limit is eight", 60*time.Second, func() (bool, string) {
		got := observe()
		return got == n, fmt.Sprintf("%d instances", got)
	})
	t.Logf("at most %d instances at once, 3 of them before the raise", most)
}
