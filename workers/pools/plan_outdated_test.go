package pools

import (
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

// An edit of the cloud_init document the members reference changes no member spec: the
// reconciler marks every member's instance outdated, and the pool rolls them successor
// first, maxSurge at a time, Ready never below minAvailable, a leased member draining until
// its lease ends.
func TestOutdatedMembersRollSuccessorFirst(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local","cloudInitRef":"doc"},"replicas":6,"rotation":{"maxSurge":2,"minAvailable":5}}`)
	w.settle()
	first := w.members()
	w.stale = map[string]events.Reason{}
	for _, n := range first {
		w.stale[n] = events.ReasonSpecChanged
	}
	w.leases[first[0]] = 1
	for range 60 {
		out := w.step()
		if r := w.readyCount(); r < 5 {
			t.Fatalf("%d Ready while rolling, minAvailable 5", r)
		}
		if n := len(w.owned); n > 8 {
			t.Fatalf("%d members, above replicas + maxSurge", n)
		}
		for _, wr := range out.Writes {
			if wr.spec == nil && wr.name == first[0] && w.leases[first[0]] > 0 {
				t.Fatal("the leased member was deleted while its lease ran")
			}
		}
		w.now = w.now.Add(drainSettle)
	}
	if !slices.Contains(w.members(), first[0]) {
		t.Fatal("the leased member is gone before its lease ended")
	}
	w.leases[first[0]] = 0
	w.settle()
	for _, n := range first {
		if _, ok := w.owned[n]; ok {
			t.Fatalf("outdated member %s still there: %v", n, w.members())
		}
	}
	if len(w.members()) != 6 {
		t.Fatalf("members %v, want 6", w.members())
	}
}

func TestCredentialsOutdatedSaySo(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":1}`)
	w.settle()
	old := w.members()[0]
	w.stale = map[string]events.Reason{old: events.ReasonCredentialsChanged}
	out := w.step()
	if !slices.Contains(reasons(out), events.ReasonCredentialsChanged) {
		t.Fatalf("events %v, want CredentialsChanged", reasons(out))
	}
}

func TestPausedRolloutRetiresNoOutdatedMember(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	first := w.members()
	w.stale = map[string]events.Reason{first[0]: events.ReasonSpecChanged, first[1]: events.ReasonSpecChanged}
	w.paused = true
	out := w.step()
	if len(out.Writes) != 0 || out.Ledger.Reason != events.ReasonRotationHeld || !strings.Contains(out.Ledger.Message, "paused") {
		t.Fatalf("paused: writes %d, ledger %s %q", len(out.Writes), out.Ledger.Reason, out.Ledger.Message)
	}
	w.paused = false
	w.settle()
	for _, n := range first {
		if _, ok := w.owned[n]; ok {
			t.Fatalf("outdated member %s still there after resume", n)
		}
	}
}

// A paused rollout holds the replacement of outdated members only: an outdated member that
// fails is replaced as any failed member is (nothing else would replace it: the reconciler
// latches Failed), while the other outdated member stays.
func TestPausedRolloutStillReplacesAFailedMember(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	first := w.members()
	w.stale = map[string]events.Reason{first[0]: events.ReasonSpecChanged, first[1]: events.ReasonSpecChanged}
	w.paused = true
	w.phase[first[0]] = events.PhaseFailed
	out := w.step()
	if !slices.Contains(reasons(out), events.ReasonMemberFailed) {
		t.Fatalf("events %v, want MemberFailed for the failed outdated member", reasons(out))
	}
	w.settle()
	if _, ok := w.owned[first[0]]; ok {
		t.Fatalf("the failed member %s is still there: %v", first[0], w.members())
	}
	if _, ok := w.owned[first[1]]; !ok {
		t.Fatalf("the paused outdated member %s was replaced: %v", first[1], w.members())
	}
}
