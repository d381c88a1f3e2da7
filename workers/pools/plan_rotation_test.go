package pools

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

func TestRotationIsSuccessorFirstAndKeepsMinAvailable(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":3,"rotation":{"maxAgeSeconds":3600}}`)
	w.settle()
	first := w.members()
	w.leases[first[0]] = 1 // a lease held across the rotation
	w.now = w.now.Add(2 * time.Hour)
	for range 40 {
		w.step()
		if r := w.readyCount(); r < 3 {
			t.Fatalf("%d Ready during rotation, minAvailable 3", r)
		}
		w.now = w.now.Add(drainSettle)
	}
	if _, ok := w.owned[first[0]]; !ok {
		t.Fatal("the leased member was deleted while its lease ran (drain timeout is 900 s)")
	}
	if !w.owned[first[0]].spec.Drain {
		t.Fatal("the leased old member is not draining")
	}
	w.leases[first[0]] = 0
	w.settle()
	for _, n := range first {
		if _, ok := w.owned[n]; ok {
			t.Fatalf("old member %s still there: %v", n, w.members())
		}
	}
	if len(w.members()) != 3 {
		t.Fatalf("members %v, want 3", w.members())
	}
}

func TestDrainTimeoutDeletesALeasedMember(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":1,"rotation":{"maxAgeSeconds":3600,"drainTimeoutSeconds":60}}`)
	w.settle()
	old := w.members()[0]
	w.leases[old] = 2
	w.now = w.now.Add(2 * time.Hour)
	w.settle()
	if _, ok := w.owned[old]; !ok {
		t.Fatal("deleted before the drain timeout")
	}
	w.now = w.now.Add(61 * time.Second)
	out := w.step()
	if !slices.Contains(reasons(out), events.ReasonDrainTimeout) {
		t.Fatalf("events %v, want DrainTimeout", reasons(out))
	}
	w.settle()
	if _, ok := w.owned[old]; ok {
		t.Fatal("still there after the drain timeout")
	}
}

func TestNoSurgeDrainsFirstWithinMinAvailable(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":3,"rotation":{"maxAgeSeconds":3600,"maxSurge":0,"minAvailable":2}}`)
	w.settle()
	w.now = w.now.Add(2 * time.Hour)
	for range 40 {
		w.step()
		if n := len(w.owned); n > 3 {
			t.Fatalf("%d members with maxSurge 0", n)
		}
		if r := w.readyCount(); r < 2 {
			t.Fatalf("%d Ready, minAvailable 2", r)
		}
		w.now = w.now.Add(drainSettle)
	}
}

func TestRotationHeldWhenNothingMayGo(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2,"rotation":{"maxAgeSeconds":3600,"maxSurge":0,"minAvailable":1}}`)
	w.settle()
	w.phase[w.members()[0]] = events.PhaseUnhealthy // only one Ready: the Ready one may not go
	w.now = w.now.Add(2 * time.Hour)
	w.step()
	w.now = w.now.Add(drainSettle)
	w.step()
	if w.ledger.Reason != events.ReasonRotationHeld {
		t.Fatalf("reason %q, want RotationHeld (%s)", w.ledger.Reason, w.ledger.Message)
	}
}

func TestBurnedNeedsDistinctTargets(t *testing.T) {
	doc := `{"template":{"provider":"local"},"replicas":2,"recycle":{"blockedTargets":3}}`
	w := newWorld(t, doc)
	w.settle()
	m := w.members()[0]
	w.blocked[m] = 2
	w.settle()
	if _, ok := w.owned[m]; !ok {
		t.Fatal("recycled below the threshold")
	}
	w.blocked[m] = 3
	out := w.step()
	if !slices.Contains(reasons(out), events.ReasonBurned) {
		t.Fatalf("events %v, want Burned", reasons(out))
	}
	w.settle()
	if _, ok := w.owned[m]; ok {
		t.Fatal("burned member not replaced")
	}
	if len(w.members()) != 2 {
		t.Fatalf("members %v", w.members())
	}
}

func TestTemplateChanges(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local","attributes":{"geo":"de"}},"replicas":2}`)
	w.settle()
	before := w.members()
	// Attributes, leases, health: in place, the same members.
	w.spec = poolSpec(t, `{"template":{"provider":"local","attributes":{"geo":"fr"},"maxLeases":4,"healthCheck":{"intervalSeconds":10}},"replicas":2}`)
	w.settle()
	if !slices.Equal(before, w.members()) {
		t.Fatalf("members %v, want %v kept", w.members(), before)
	}
	for _, n := range before {
		s := w.owned[n].spec
		if s.Attributes["geo"] != "fr" || *s.MaxLeases != 4 || s.HealthCheck.IntervalSeconds != 10 {
			t.Fatalf("%s not updated in place: %+v", n, s)
		}
	}
	// The port is the instance: every member is replaced.
	w.spec = poolSpec(t, `{"template":{"provider":"local","port":8080},"replicas":2}`)
	w.settle()
	after := w.members()
	if len(after) != 2 || slices.ContainsFunc(after, func(n string) bool { return slices.Contains(before, n) }) {
		t.Fatalf("members %v, want two new ones replacing %v", after, before)
	}
	for _, n := range after {
		if w.owned[n].spec.Port != 8080 {
			t.Fatalf("%s: port %d", n, w.owned[n].spec.Port)
		}
	}
}

func TestRotateAtJitterIsStableAndBounded(t *testing.T) {
	r := schemas.Rotation{MaxAgeSeconds: 3600, JitterSeconds: 600}
	a := rotateAt(r, "web-abcde", t0)
	if a != rotateAt(r, "web-abcde", t0) {
		t.Fatal("not stable")
	}
	if a.After(t0.Add(time.Hour)) || a.Before(t0.Add(50*time.Minute)) {
		t.Fatalf("rotateAt %v outside [50m, 60m]", a.Sub(t0))
	}
	if !rotateAt(schemas.Rotation{}, "x", t0).IsZero() {
		t.Fatal("no max age must mean never")
	}
}

// The controller never changes an existing member's instance by writing its spec, not even
// when the ledger lost the member's revision (a pass killed before its last write, a ledger
// deleted by hand): the reconciler would replace the instance under its leases, every
// member at once. An instance that differs from the template is rolled, successor first.
func TestNoInPlaceInstanceChangeWithoutARecordedRevision(t *testing.T) {
	for _, lose := range []string{"revisions", "ledger"} {
		t.Run(lose, func(t *testing.T) {
			w := newWorld(t, `{"template":{"provider":"local"},"replicas":2,"rotation":{"maxAgeSeconds":3600}}`)
			w.settle()
			if lose == "ledger" {
				w.ledger = nil
			} else {
				for i := range w.ledger.Members {
					w.ledger.Members[i].Rev = 0
				}
			}
			w.spec = poolSpec(t, `{"template":{"provider":"local","port":8080},"replicas":2,"rotation":{"maxAgeSeconds":3600}}`)
			old := w.members()
			for range 30 {
				out := w.step()
				for _, wr := range out.Writes {
					if s, err := schemas.ParseProxySpec(wr.spec); err == nil && wr.rev != 0 && s.Port == 8080 {
						t.Fatalf("existing member %s rewritten in place with the new port (%s)", wr.name, wr.reason)
					}
				}
				if r := w.readyCount(); r < 2 {
					t.Fatalf("%d Ready during the roll, minAvailable 2", r)
				}
				w.now = w.now.Add(drainSettle)
			}
			for _, n := range old {
				if _, ok := w.owned[n]; ok {
					t.Fatalf("old member %s never rolled: %v", n, w.members())
				}
			}
		})
	}
}

// The settle before a drained member's leases are counted runs from when its spec was seen
// saying drain, not from when the ledger recorded the drain: a kill between the two, and the
// next leader's drain write must not be followed by a delete a moment later.
func TestDrainSettleCountsFromTheSpec(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	victim := w.members()[0]
	for i := range w.ledger.Members {
		if w.ledger.Members[i].Name == victim {
			w.ledger.Members[i].DrainingSince, w.ledger.Members[i].Retire = w.now, events.ReasonScaleDown
		}
	}
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":1}`)
	w.now = w.now.Add(10 * time.Second) // the next leader, later
	w.step()                            // writes drain: true
	if !w.owned[victim].spec.Drain {
		t.Fatal("no drain written")
	}
	for range 2 {
		w.now = w.now.Add(10 * time.Millisecond)
		for _, wr := range w.step().Writes {
			if wr.name == victim && wr.spec == nil {
				t.Fatalf("%s deleted moments after its spec first said drain", victim)
			}
		}
	}
	w.now = w.now.Add(drainSettle)
	w.settle()
	if _, ok := w.owned[victim]; ok {
		t.Fatal("never deleted after the settle")
	}
}

// A Failed member (the reconciler latches Failed) is replaced like a burned one; a Failed
// successor does not hold its predecessor and the surge for good.
func TestFailedMembersAreReplaced(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":3,"rotation":{"maxAgeSeconds":3600,"maxSurge":1}}`)
	w.settle()
	old := w.members()
	w.now = w.now.Add(2 * time.Hour)
	w.step()
	var succ string
	for _, m := range w.ledger.Members {
		if m.Successor != "" {
			succ = m.Successor
		}
	}
	w.phase[succ] = events.PhaseFailed
	for range 60 {
		w.step()
		w.now = w.now.Add(drainSettle)
	}
	for _, n := range old {
		if _, ok := w.owned[n]; ok {
			t.Fatalf("old member %s never rotated (phase %s, %s: %s)", n, w.ledger.Phase, w.ledger.Reason, w.ledger.Message)
		}
	}
	if _, ok := w.owned[succ]; ok {
		t.Fatalf("the Failed successor %s is still there", succ)
	}
}

// Members kept back by their provider's instance limit make the pool say so: Progressing,
// reason LimitReached, with how many wait and why; once they are Ready the pool is too.
func TestMembersWaitingForTheInstanceLimit(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":4}`)
	w.settle()
	waiting := w.members()[2:]
	for _, n := range waiting {
		w.phase[n] = events.PhasePending
		w.limited[n] = "provider local has 2 of its 2 instances (maxInstances); it is created when room appears"
	}
	w.step()
	if w.ledger.Phase != events.PoolProgressing || w.ledger.Reason != events.ReasonLimitReached ||
		!strings.Contains(w.ledger.Message, "2 of 4 members Ready; 2 wait for the instance limit ("+waiting[0]+": provider local has 2 of its 2") {
		t.Fatalf("pool %s %s %q, want Progressing, LimitReached, saying who waits and why", w.ledger.Phase, w.ledger.Reason, w.ledger.Message)
	}
	for _, n := range waiting {
		w.phase[n] = events.PhaseReady
		delete(w.limited, n)
	}
	w.step()
	if w.ledger.Phase != events.PoolReady || w.ledger.Reason != "" {
		t.Fatalf("pool %s %s once every member is Ready", w.ledger.Phase, w.ledger.Reason)
	}
}
