package flowtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/nats-io/nats.go/jetstream"
)

// When the leader's op-results consumer ends for good under it, the leader hears it: it
// steps down (releasing its lease), leads again, declares the consumer anew, and proxies
// converge again. Shown for the consumer deleted by hand and for EGRESS_EVENTS deleted and
// declared again (as `egressd setup` would).
func TestLeaderStepsDownWhenItsResultsConsumerEnds(t *testing.T) {
	h := newHarness(t)
	lease := h.watchLeaderLease()
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	h.put("a", `{"provider":"fake"}`)
	h.waitPhase("a", events.PhaseRunning)
	h.waitLeader(lease, "r1", 0)

	// steppedDown waits for r1 to release the lease after mark and to hold it again.
	steppedDown := func(mark int) {
		t.Helper()
		h.waitFor("r1 to step down and lead again", 30*time.Second, func() (bool, string) {
			cs := lease.snapshot()[mark:]
			rel := slices.IndexFunc(cs, func(c leaseChange) bool { return c.kind == "released" })
			return rel >= 0 && slices.ContainsFunc(cs[rel:], func(c leaseChange) bool { return c.kind == "held" && c.holder == "r1" }),
				fmt.Sprint(cs)
		})
	}

	// The consumer deleted by hand.
	{
		mark := len(lease.snapshot())
		if err := h.store.JS.DeleteConsumer(h.ctx, events.StreamEvents, "reconciler"); err != nil {
			t.Fatal(err)
		}
		steppedDown(mark)
		h.put("b", `{"provider":"fake"}`)
		h.waitPhase("b", events.PhaseRunning)
	}

	// EGRESS_EVENTS deleted, and declared again.
	{
		mark := len(lease.snapshot())
		if err := h.store.JS.DeleteStream(h.ctx, events.StreamEvents); err != nil {
			t.Fatal(err)
		}
		// The leader cannot lead without the stream: it keeps stepping down, naming why, until
		// the stream is back.
		h.waitFor("the leader to give up the lease", 30*time.Second, func() (bool, string) {
			cs := lease.snapshot()[mark:]
			return slices.ContainsFunc(cs, func(c leaseChange) bool { return c.kind == "released" }), fmt.Sprint(cs)
		})
		if _, err := h.store.JS.Stream(h.ctx, events.StreamEvents); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("EGRESS_EVENTS = %v, want it still deleted (nothing but setup declares it)", err)
		}
		if _, err := kvstore.Ensure(h.ctx, h.store.JS, kvstore.Options{}); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the results consumer to be declared again", 30*time.Second, func() (bool, string) {
			_, err := h.store.JS.Consumer(h.ctx, events.StreamEvents, "reconciler")
			return err == nil, fmt.Sprint(err)
		})
		h.put("c", `{"provider":"fake"}`)
		h.waitPhase("c", events.PhaseRunning)
		h.del("a")
		h.waitGone("a")
	}
}
