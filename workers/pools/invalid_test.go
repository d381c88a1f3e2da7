package pools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go"
)

// A pool whose template names a provider the catalog does not have is Invalid, says so in an
// event, and creates no member (before, it created members the reconciler then held
// Invalid); once the provider is published, the same spec creates its members.
func TestPoolOnAnUnknownProviderIsInvalidAndCreatesNothing(t *testing.T) {
	r := newRig(t)
	r.reconcile()
	nc, _ := kvstoretest.Connect(t, r.srv)
	sub, err := nc.SubscribeSync(events.EventSubject(events.KindPool, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	_, current := r.watchMembers("bad")
	stop := r.controller("a")
	defer stop()
	r.putPool("bad", `{"template":{"provider":"nope"},"replicas":2}`)

	const want = `template.provider: unknown provider "nope" (known: local)`
	r.waitFor("the pool to be Invalid", func() (bool, string) {
		st, ok := r.ledger("bad")
		return ok && st.Phase == events.PoolInvalid, fmt.Sprintf("%+v", st)
	})
	st, _ := r.ledger("bad")
	if st.Reason != events.ReasonUnknownProvider || st.Message != want || len(st.Members) != 0 {
		t.Fatalf("ledger %+v; want UnknownProvider, %q, no members", st, want)
	}
	ev := nextEvent(t, sub)
	if ev.Kind != events.KindPool || ev.Reason != events.ReasonUnknownProvider || !strings.Contains(ev.Message, want) {
		t.Fatalf("event %+v", ev)
	}
	// A few resyncs later: still nothing made, and no second event for the same problem.
	time.Sleep(500 * time.Millisecond)
	if n := current(); n != 0 {
		t.Fatalf("an invalid pool created %d members", n)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a second event for the same problem: %s", m.Data)
	}

	r.publishProvider("nope", "h1")
	r.settled("bad", 2, current)
}

func nextEvent(t *testing.T, sub *nats.Subscription) events.Event {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no pool event: %v", err)
	}
	var ev events.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}
