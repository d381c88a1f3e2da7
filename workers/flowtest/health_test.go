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
	"github.com/nats-io/nats.go"
)

// The reconciler asks for a probe of every addressed proxy, at once and then every
// interval, and the probers' verdict moves the phase between Running, Ready and Unhealthy.
func TestProbesAndHealthDriveThePhase(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	nc, _ := h.connectNC()
	probes := make(chan events.ProbeRequest, 64)
	sub, err := nc.QueueSubscribe(events.ProbeSubjects, events.ProbeQueue, func(m *nats.Msg) {
		var r events.ProbeRequest
		if json.Unmarshal(m.Data, &r) == nil {
			probes <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	h.put("px", `{"provider":"fake","healthCheck":{"intervalSeconds":1,"timeoutSeconds":1}}`)
	h.put("ext", `{"mode":"external","endpoint":{"host":"10.9.9.9","port":8080}}`)
	st := h.waitPhase("px", events.PhaseRunning)
	addr := net.JoinHostPort(st.IP, strconv.Itoa(st.Port))
	seen := map[string]events.ProbeRequest{}
	deadline := time.After(10 * time.Second)
	for len(seen) < 2 {
		select {
		case r := <-probes:
			seen[r.Proxy] = r
		case <-deadline:
			t.Fatalf("probe requests seen: %+v", seen)
		}
	}
	if r := seen["px"]; r.Provider != "fake" || r.Host != "h1" || net.JoinHostPort(r.Address, strconv.Itoa(r.Port)) != addr {
		t.Fatalf("probe of px: %+v, want %s", r, addr)
	}
	if r := seen["ext"]; r.Provider != events.External || r.Address != "10.9.9.9" || r.Port != 8080 {
		t.Fatalf("probe of ext: %+v", r)
	}
	// Another probe comes within about one interval.
	select {
	case <-probes:
	case <-time.After(5 * time.Second):
		t.Fatal("no second probe within the interval")
	}

	verdict := func(proxy, address string, healthy bool, failures int) {
		rec := events.ProxyHealth{V: 1, Proxy: proxy, Address: address, Healthy: healthy, ConsecutiveFailures: failures,
			SuccessThreshold: 1, FailureThreshold: 3, LastError: "connection refused"}
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
