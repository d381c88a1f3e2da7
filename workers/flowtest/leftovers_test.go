package flowtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/providertest"
)

// A health record goes with the instance it is about, at once rather than at its TTL (an hour
// here): the old address's record when a port change replaces the instance, a predecessor's
// record on the same ip:port, the record of a deleted proxy, and one left by a proxy that
// was gone before this leader started. A record about the instance the proxy has now stays.
func TestHealthRecordsGoWithTheirInstance(t *testing.T) {
	h := newHarness(t)
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")

	write := func(proxy, address string, probed time.Time) {
		t.Helper()
		rec := events.ProxyHealth{V: 1, Proxy: proxy, Address: address, Healthy: true, ConsecutiveSuccesses: 1,
			SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: probed.UTC()}
		b, _ := json.Marshal(rec)
		if _, err := kvstore.PutTTL(h.ctx, h.store.JS, h.store.Health, proxy, b, 0, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	record := func(proxy string) (events.ProxyHealth, bool) {
		t.Helper()
		var rec events.ProxyHealth
		_, err := kvstore.GetJSON(h.ctx, h.store.Health, proxy, &rec)
		if errors.Is(err, kvstore.ErrNotFound) {
			return rec, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return rec, true
	}
	waitNoRecord := func(proxy, why string) {
		t.Helper()
		h.waitFor(why, 10*time.Second, func() (bool, string) {
			rec, ok := record(proxy)
			return !ok, fmt.Sprintf("record about %s probed %s", rec.Address, rec.LastProbeAt)
		})
	}
	// fence waits until the leader has finished every pass that began before it: a new
	// proxy's status is written in a later pass than any decision already visible.
	fences := 0
	fence := func() {
		t.Helper()
		fences++
		name := fmt.Sprintf("fence-%d", fences)
		h.put(name, `{"provider":"fake"}`)
		h.waitFor(name+"'s status", 10*time.Second, func() (bool, string) { _, ok := h.status(name); return ok, "" })
	}

	h.put("px", `{"provider":"fake","port":8080}`)
	st := h.waitPhase("px", events.PhaseRunning)
	write("px", st.Address(), time.Now())
	h.waitPhase("px", events.PhaseReady)
	fence()
	if _, ok := record("px"); !ok {
		t.Fatal("the record about the running instance was removed")
	}

	// A port change replaces the instance: the old address's record goes with it.
	h.put("px", `{"provider":"fake","port":8081}`)
	waitNoRecord("px", "the replaced instance's record to be removed")
	st = h.waitPhase("px", events.PhaseRunning)
	if st.Port != 8081 {
		t.Fatalf("replaced onto port %d", st.Port)
	}

	// A record on the current ip:port probed before the address appeared is a predecessor's.
	write("px", st.Address(), st.AddressAt.Add(-time.Second))
	waitNoRecord("px", "a predecessor's record on the same address to be removed")
	write("px", st.Address(), time.Now())
	h.waitPhase("px", events.PhaseReady)
	fence()
	if rec, ok := record("px"); !ok || rec.Address != st.Address() {
		t.Fatalf("the new instance's record was removed or changed: %+v, %v", rec, ok)
	}

	// Deleted: the record goes with the status.
	h.del("px")
	h.waitGone("px")
	waitNoRecord("px", "the deleted proxy's record to be removed")

	// A record of a proxy that has neither spec nor status.
	write("ghost", "127.0.0.9:3128", time.Now())
	waitNoRecord("ghost", "a record of no proxy to be removed")
}
