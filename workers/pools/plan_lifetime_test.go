package pools

import (
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// A member whose instance has a lifetime (maxLifetimeSeconds, its end stamped on the
// instance) is replaced successor-first ahead of that end, early enough for its successor to
// become Ready and its leases to drain (the drain timeout plus provisionAllowance), so the
// collector never cuts a lease the pool could have moved.
func TestLifetimeReplacesAheadSuccessorFirst(t *testing.T) {
	const lifetime = time.Hour
	w := newWorld(t, `{"template":{"provider":"local","maxLifetimeSeconds":3600},"replicas":2,"rotation":{"drainTimeoutSeconds":60}}`)
	w.expiry = map[string]expiry{}
	stamp := func() { // the reconciler's status: each new instance's lifetime from now
		for n := range w.owned {
			if _, ok := w.expiry[n]; !ok {
				w.expiry[n] = expiry{from: w.now, until: w.now.Add(lifetime)}
			}
		}
	}
	w.settle()
	stamp()
	t0 := w.now // the members' instances were made now
	first := w.members()
	lead := time.Minute + provisionAllowance
	w.step()
	if at := w.ledger.NextRotation; !at.Equal(t0.Add(lifetime - lead)) {
		t.Fatalf("next rotation %v, want %v: the lifetime's end less the drain timeout and the allowance", at, t0.Add(lifetime-lead))
	}
	w.now = t0.Add(lifetime - lead - time.Second)
	if out := w.step(); slices.Contains(reasons(out), events.ReasonLifetimeEnding) {
		t.Fatalf("replaced before its time: %v", reasons(out))
	}
	w.leases[first[0]] = 1 // held across the replacement
	w.now = t0.Add(lifetime - lead)
	sawEnding := false
	for range 20 {
		out := w.step()
		stamp()
		sawEnding = sawEnding || slices.Contains(reasons(out), events.ReasonLifetimeEnding)
		if r := w.readyCount(); r < 2 {
			t.Fatalf("%d Ready while replacing, want 2 (successor-first)", r)
		}
		w.now = w.now.Add(drainSettle)
	}
	if !sawEnding {
		t.Fatal("no LifetimeEnding: members were not replaced ahead of their lifetime")
	}
	if o, ok := w.owned[first[0]]; !ok || !o.spec.Drain {
		t.Fatalf("the leased member %s was deleted or is not draining while its lease runs", first[0])
	}
	w.leases[first[0]] = 0
	w.settle()
	if !w.now.Before(t0.Add(lifetime)) {
		t.Fatalf("replacement done at %v, after the lifetime's end %v", w.now, t0.Add(lifetime))
	}
	for _, n := range first {
		if _, ok := w.owned[n]; ok {
			t.Fatalf("old member %s still there: %v", n, w.members())
		}
	}
	if len(w.members()) != 2 {
		t.Fatalf("members %v, want 2", w.members())
	}
}

// A short lifetime is not spent waiting: the member is replaced at half of it at the latest.
func TestShortLifetimeReplacesAtHalf(t *testing.T) {
	e := expiry{from: t0, until: t0.Add(20 * time.Second)}
	if got := lifetimeRotateAt(e, 15*time.Minute); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("rotate at %v, want half the lifetime %v", got, t0.Add(10*time.Second))
	}
	if got := lifetimeRotateAt(expiry{}, 15*time.Minute); !got.IsZero() {
		t.Errorf("rotate at %v without a lifetime, want never", got)
	}
}
