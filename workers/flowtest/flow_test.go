package flowtest

import (
	"fmt"
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
		creates := fake.Calls("create")
		h.put("web", `{"provider":"fake","attributes":{"geo":"fr"},"maxLeases":3}`)
		time.Sleep(500 * time.Millisecond)
		st2 := h.waitPhase("web", events.PhaseRunning)
		if fake.Calls("create") != creates || st2.InstanceID != st.InstanceID {
			t.Fatalf("an attribute change replaced the instance")
		}
	})

	t.Run("port change replaces under the same name", func(t *testing.T) {
		deletes := fake.Calls("delete")
		h.put("web", `{"provider":"fake","port":8080}`)
		h.waitFor("replacement on port 8080", 30*time.Second, func() (bool, string) {
			st, _ := h.status("web")
			return st.Phase == events.PhaseRunning && st.Port == 8080, fmt.Sprintf("%s port %d", st.Phase, st.Port)
		})
		st2, _ := h.status("web")
		if fake.Calls("delete") <= deletes || st2.InstanceName != name {
			t.Fatalf("replacement: deletes %d→%d, name %q→%q", deletes, fake.Calls("delete"), name, st2.InstanceName)
		}
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
		fake.Fail("create", providers.ErrQuota, 1)
		h.put("qu", `{"provider":"fake"}`)
		st := h.waitPhase("qu", events.PhaseWaiting)
		if st.RetryAt.IsZero() || st.Reason != events.ReasonQuota {
			t.Fatalf("waiting status: %+v", st)
		}
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

// The leader dies without releasing its lease: a standby takes over once it expires, and
// the proxies the old leader was converging still converge.
func TestReconcilerFailover(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	stop1 := h.reconciler("r1")
	h.put("a", `{"provider":"fake"}`)
	h.waitPhase("a", events.PhaseRunning)
	stop2 := h.reconciler("r2")
	defer stop2()
	stop1()
	h.put("b", `{"provider":"fake"}`)
	h.waitPhase("b", events.PhaseRunning)
	h.del("a")
	h.waitGone("a")
}
