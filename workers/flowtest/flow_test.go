package flowtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

// Two provisioners (separate connections, as separate processes) on one host with a limit
// of 2: the server never lets more than 2 creates run at once, yet both slots are used.
func TestHostLimitHoldsAcrossProvisioners(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(2))
	fake.Delay("create", 300*time.Millisecond)
	h.provisioner("fake", fake, "w1")
	h.provisioner("fake", fake, "w2")
	h.reconciler("r1")
	const n = 12
	for i := range n {
		h.put(fmt.Sprintf("p%d", i), `{"provider":"fake"}`)
	}
	for i := range n {
		h.waitPhase(fmt.Sprintf("p%d", i), events.PhaseRunning)
	}
	if got := fake.MaxConcurrent("create"); got != 2 {
		t.Fatalf("max concurrent creates on the host = %d, want exactly the limit 2", got)
	}
	if got := fake.Calls("create"); got < n {
		t.Fatalf("creates = %d, want at least %d", got, n)
	}
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")

	h.put("web", `{"provider":"fake","attributes":{"geo":"de"}}`)
	st := h.waitPhase("web", events.PhaseRunning)
	if st.IP == "" || st.Port != 3128 || st.InstanceID == "" || st.UID == "" || st.Host != "h1" {
		t.Fatalf("running status incomplete: %+v", st)
	}
	name := st.InstanceName
	if name != providers.InstanceName(installation, st.UID) {
		t.Fatalf("instance name %q is not derived from uid and installation", name)
	}

	t.Run("attributes change nothing", func(t *testing.T) {
		creates, deletes := fake.Calls("create"), fake.Calls("delete")
		rev := h.put("web", `{"provider":"fake","attributes":{"geo":"fr"},"maxLeases":3}`)
		// The status records the revision it acted on, with any op that decision issued: once
		// it names this revision, the change has been decided, and a replacement would show.
		var st2 events.ProxyStatus
		h.waitFor("the attribute change to be decided", 30*time.Second, func() (bool, string) {
			st2, _ = h.status("web")
			return st2.SpecRevision == rev, fmt.Sprintf("specRevision %d, want %d", st2.SpecRevision, rev)
		})
		if st2.Phase != events.PhaseRunning || st2.Op != nil || st2.Teardown != "" || st2.InstanceID != st.InstanceID ||
			fake.Calls("create") != creates || fake.Calls("delete") != deletes {
			t.Fatalf("an attribute change started a replacement: %+v (creates %d→%d, deletes %d→%d)",
				st2, creates, fake.Calls("create"), deletes, fake.Calls("delete"))
		}
	})

	t.Run("port change rolls a successor first", func(t *testing.T) {
		deletes := fake.Calls("delete")
		h.put("web", `{"provider":"fake","port":8080}`)
		// A proxy of its own is rolled successor first (decision 98): the successor is built
		// beside the instance under another name, the status switches to it, and the old
		// instance, which holds no lease, is deleted once the rollout counted its leases.
		var st2 events.ProxyStatus
		h.waitFor("the successor on port 8080 and the old instance gone", 30*time.Second, func() (bool, string) {
			st2, _ = h.status("web")
			return st2.Phase == events.PhaseRunning && st2.Port == 8080 && len(st2.Retiring) == 0 && st2.Successor == nil &&
					fake.Calls("delete") > deletes,
				fmt.Sprintf("%s port %d, %d retiring, %d deletes", st2.Phase, st2.Port, len(st2.Retiring), fake.Calls("delete")-deletes)
		})
		list, err := fake.List(h.ctx)
		if err != nil || len(list) != 1 || list[0].Name != st2.InstanceName || st2.InstanceName == name {
			t.Fatalf("after the rollout: instances %v (%v), the status's %q, the first %q", list, err, st2.InstanceName, name)
		}
		name = st2.InstanceName
	})

	t.Run("a stopped instance is recreated", func(t *testing.T) {
		if !fake.SetState(name, providers.StateStopped) {
			t.Fatal("instance missing in the fake")
		}
		h.waitFor("recreation after stop", 30*time.Second, func() (bool, string) {
			st, _ := h.status("web")
			inst, err := fake.Get(h.ctx, st.InstanceID)
			return err == nil && inst.State == providers.StateRunning && st.Phase == events.PhaseRunning, fmt.Sprintf("%s %v", st.Phase, inst.State)
		})
	})

	t.Run("deleting the key deletes the instance and the status", func(t *testing.T) {
		h.del("web")
		h.waitGone("web")
		list, err := fake.List(h.ctx)
		if err != nil || len(list) != 0 {
			t.Fatalf("instances left: %v %v", list, err)
		}
	})
}

func TestErrorClasses(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")

	t.Run("transient errors are visible and retried", func(t *testing.T) {
		fake.Fail("create", fmt.Errorf("%w: hypervisor busy", providers.ErrTransient), -1)
		h.put("tr", `{"provider":"fake"}`)
		h.waitFor("a visible transient error", 30*time.Second, func() (bool, string) {
			st, _ := h.status("tr")
			return st.LastError != nil && st.LastError.Class == events.ClassTransient && strings.Contains(st.LastError.Message, "hypervisor busy"), fmt.Sprintf("%+v", st.LastError)
		})
		fake.Fail("create", nil, 0)
		st := h.waitPhase("tr", events.PhaseRunning)
		if st.LastError != nil {
			t.Fatalf("lastError kept after success: %+v", st.LastError)
		}
	})

	t.Run("quota waits", func(t *testing.T) {
		// Quota until the test has seen the wait: a single refusal's second of Waiting can
		// pass between two looks on a loaded machine.
		fake.Fail("create", providers.ErrQuota, -1)
		h.put("qu", `{"provider":"fake"}`)
		st := h.waitPhase("qu", events.PhaseWaiting)
		if st.RetryAt.IsZero() || st.Reason != events.ReasonQuota {
			t.Fatalf("waiting status: %+v", st)
		}
		fake.Fail("create", nil, 0)
		h.waitPhase("qu", events.PhaseRunning)
	})

	t.Run("permanent errors latch until the spec changes", func(t *testing.T) {
		fake.Fail("create", fmt.Errorf("%w: no such image", providers.ErrPermanent), 1)
		h.put("pe", `{"provider":"fake"}`)
		st := h.waitPhase("pe", events.PhaseFailed)
		calls := fake.Calls("create")
		time.Sleep(time.Second)
		if fake.Calls("create") != calls {
			t.Fatal("a Failed proxy was retried without a spec change")
		}
		if !strings.Contains(st.Message, "no such image") {
			t.Fatalf("message %q", st.Message)
		}
		h.put("pe", `{"provider":"fake","attributes":{"retry":"1"}}`)
		h.waitPhase("pe", events.PhaseRunning)
	})
}

func TestInvalidSpecs(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	cases := []struct{ key, spec, want string }{
		{"bad-json", `{"provider":`, "(document)"},
		{"unknown-field", `{"provider":"fake","colour":"red"}`, "colour: unknown field"},
		{"bad-port", `{"provider":"fake","port":70000}`, "port: must be between 1 and 65535"},
		{"unknown-provider", `{"provider":"vmware"}`, `provider: unknown provider "vmware"`},
		{"Bad_Name", `{"provider":"fake"}`, "name:"},
	}
	for _, c := range cases {
		h.put(c.key, c.spec)
	}
	for _, c := range cases {
		st := h.waitPhase(c.key, events.PhaseInvalid)
		if !strings.Contains(st.Message, c.want) {
			t.Errorf("%s: message %q, want it to name %q", c.key, st.Message, c.want)
		}
	}
	if n := fake.Calls("create"); n != 0 {
		t.Fatalf("invalid specs provisioned %d instances", n)
	}
	h.put("bad-port", `{"provider":"fake","port":8080}`)
	h.waitPhase("bad-port", events.PhaseRunning)
	h.del("Bad_Name")
	h.waitGone("Bad_Name")
}

// The leader dies without releasing its lease (its connection is gone, as after kill -9): the
// standby takes over only once the server has expired the lease, and the proxies the old
// leader was converging still converge.
func TestReconcilerFailover(t *testing.T) {
	h := newHarness(t)
	lease := h.watchLeaderLease()
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	r1 := h.startReconciler("r1")
	h.put("a", `{"provider":"fake"}`)
	h.waitPhase("a", events.PhaseRunning)
	h.waitLeader(lease, "r1", 0)
	stop2 := h.reconciler("r2")
	defer stop2()
	fake.Delay("create", 500*time.Millisecond) // b is still converging when r1 dies
	h.put("b", `{"provider":"fake"}`)
	h.waitFor("r1 to issue b's create", 30*time.Second, func() (bool, string) {
		st, _ := h.status("b")
		return st.Op != nil, fmt.Sprintf("%+v", st.Op)
	})
	r1.kill()
	h.waitPhase("b", events.PhaseRunning)
	h.del("a")
	h.waitGone("a")

	// In stream order: r1 held the lease, the server expired it, and only then did r2 take it.
	cs := lease.snapshot()
	took := slices.IndexFunc(cs, func(c leaseChange) bool { return c.kind == "held" && c.holder == "r2" })
	if took < 0 {
		t.Fatalf("r2 never held the lease: %v", cs)
	}
	r1Held := -1
	for i, c := range cs[:took] {
		switch {
		case c.kind == "held" && c.holder == "r1":
			r1Held = i
		case c.kind == "expired":
		default:
			t.Fatalf("before r2 took over, the lease was %s (%s): %v", c.kind, c.holder, cs)
		}
	}
	if r1Held < 0 {
		t.Fatalf("r1 never held the lease before r2: %v", cs)
	}
	if gap := cs[r1Held+1 : took]; len(gap) != 1 || gap[0].kind != "expired" {
		t.Fatalf("between r1's last renewal and r2's lease: %v, want exactly the server's expiry", gap)
	}
}
