package flowtest

import (
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/providertest"
)

// The probers' verdict moves the phase between Running, Ready and Unhealthy; an expired one
// (nobody probes the proxy any more) means unknown, so Running again.
func TestHealthDrivesThePhase(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	h.put("px", `{"provider":"fake","healthCheck":{"intervalSeconds":1,"timeoutSeconds":1}}`)
	h.put("ext", `{"mode":"external","endpoint":{"host":"10.9.9.9","port":8080}}`)
	st := h.waitPhase("px", events.PhaseRunning)
	addr := net.JoinHostPort(st.IP, strconv.Itoa(st.Port))
	if st.AddressAt.IsZero() {
		t.Errorf("Running without addressAt: %+v", st)
	}

	verdict := func(proxy, address string, healthy bool, failures int) {
		rec := events.ProxyHealth{V: 1, Proxy: proxy, Address: address, Healthy: healthy, ConsecutiveFailures: failures,
			SuccessThreshold: 1, FailureThreshold: 3, LastError: "connection refused", LastProbeAt: time.Now().UTC()}
		b, _ := json.Marshal(rec)
		if _, err := kvstore.PutTTL(h.ctx, h.store.JS, h.store.Health, proxy, b, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	verdict("px", addr, true, 0)
	if st := h.waitPhase("px", events.PhaseReady); st.ReadyAt.IsZero() {
		t.Fatal("Ready without readyAt")
	}
	verdict("px", addr, false, 3)
	if st := h.waitPhase("px", events.PhaseUnhealthy); st.Message != "connection refused" {
		t.Fatalf("unhealthy message %q", st.Message)
	}
	verdict("ext", "10.9.9.9:8080", true, 0)
	h.waitPhase("ext", events.PhaseReady)
	// An expired verdict means unknown: back to Running.
	if err := h.store.Health.Purge(h.ctx, "px"); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("px", events.PhaseRunning)
}
