package pools

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

const twoPlaces = `{"template":{"provider":"a"},"replicas":%d,"placements":[{"provider":"a"},{"provider":"b"}]}`

func placementOfMember(w *world, name string) int {
	for _, m := range w.ledger.Members {
		if m.Name == name {
			return m.Placement
		}
	}
	return -1
}

// perPlacement counts the serving members at each placement, from the record.
func perPlacement(w *world) []int {
	out := []int{}
	for _, p := range w.ledger.Placements {
		out = append(out, p.Members)
	}
	return out
}

func firstAt(w *world, placement int) string {
	for _, m := range w.ledger.Members {
		if m.Placement == placement && active(m) {
			return m.Name
		}
	}
	return ""
}

// Quota on a placement: it is held, the stuck member is replaced successor-first at the
// other placement, new members go there too, the record and an event say where and why, and
// once the hold ends new members may go back.
func TestPlanQuotaFallback(t *testing.T) {
	w := newWorld(t, strings.Replace(twoPlaces, "%d", "3", 1))
	w.stuck = map[string]stuck{}
	w.settle()
	if got := perPlacement(w); len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("round-robin before any quota: %v", got)
	}
	victim := firstAt(w, 0)
	w.phase[victim] = events.PhaseWaiting
	w.stuck[victim] = stuck{reason: events.ReasonQuota, message: "Quota 'CPUS' exceeded.", retryAt: w.now.Add(10 * time.Minute)}
	out := w.step()
	ev := findEvent(out.Events, events.ReasonPlacementFallback)
	if ev == nil || ev.Pool.Fallback == nil || ev.Pool.Fallback.From != 0 || ev.Pool.Fallback.To != 1 || ev.Pool.Member != victim ||
		!strings.Contains(ev.Message, "placement 0 (a) answered QuotaExceeded (Quota 'CPUS' exceeded.): new members go to placement 1 (b)") {
		t.Fatalf("fallback event: %+v", out.Events)
	}
	hold := w.ledger.Placements[0].Hold
	if hold == nil || hold.Reason != events.ReasonQuota || !hold.Until.Equal(w.now.Add(10*time.Minute)) || w.ledger.Placements[1].Hold != nil {
		t.Fatalf("placements recorded: %+v", w.ledger.Placements)
	}
	if !strings.Contains(w.ledger.Message, "placement 0 (a) is held (QuotaExceeded)") {
		t.Fatalf("pool message %q", w.ledger.Message)
	}
	w.settle()
	if _, ok := w.owned[victim]; ok {
		t.Fatalf("the member stuck on quota is still there: %v", w.members())
	}
	if got := perPlacement(w); got[0] != 1 || got[1] != 2 {
		t.Fatalf("after the fallback: %v", got)
	}
	// More members while held: all at placement 1.
	w.spec = poolSpec(t, strings.Replace(twoPlaces, "%d", "5", 1))
	w.settle()
	if got := perPlacement(w); got[0] != 1 || got[1] != 4 {
		t.Fatalf("scaled up while held: %v", got)
	}
	// The hold ends: said once, and the next member goes back to placement 0.
	w.now = w.now.Add(11 * time.Minute)
	out = w.step()
	if ev := findEvent(out.Events, events.ReasonPlacementRestored); ev == nil || w.ledger.Placements[0].Hold != nil {
		t.Fatalf("hold end: events %v, placements %+v", reasons(out), w.ledger.Placements)
	}
	w.spec = poolSpec(t, strings.Replace(twoPlaces, "%d", "6", 1))
	w.settle()
	if got := perPlacement(w); got[0] != 2 || got[1] != 4 {
		t.Fatalf("after the hold: %v", got)
	}
}

// Where the fallback does not apply: every placement held (members wait where they are), a
// pool with one placement (nowhere else to go), a Ready member, and reasons that are not a
// placement's (LimitReached waits as before).
func TestPlanQuotaFallbackLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		stuckAt []int // the placements whose first member is stuck
		reason  events.Reason
		phase   events.Phase
		moved   bool
		to      int // the event's To; -2: no event
	}{
		{name: "quota", doc: twoPlaces, stuckAt: []int{0}, reason: events.ReasonQuota, phase: events.PhaseWaiting, moved: true, to: 1},
		{name: "provider unhealthy", doc: twoPlaces, stuckAt: []int{1}, reason: events.ReasonProviderUnhealthy, phase: events.PhasePending, moved: true, to: 0},
		{name: "every placement held", doc: twoPlaces, stuckAt: []int{0, 1}, reason: events.ReasonQuota, phase: events.PhaseWaiting, to: -1},
		{name: "one placement", doc: `{"template":{"provider":"a"},"replicas":%d,"placements":[{"provider":"a"}]}`, stuckAt: []int{0},
			reason: events.ReasonQuota, phase: events.PhaseWaiting, to: -2},
		{name: "no placements", doc: `{"template":{"provider":"a"},"replicas":%d}`, stuckAt: []int{0}, reason: events.ReasonQuota, phase: events.PhaseWaiting, to: -2},
		{name: "ready despite the reason", doc: twoPlaces, stuckAt: []int{0}, reason: events.ReasonQuota, phase: events.PhaseReady, to: -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, strings.Replace(tc.doc, "%d", "2", 1))
			w.stuck = map[string]stuck{}
			w.settle()
			var victims []string
			for _, i := range tc.stuckAt {
				v := firstAt(w, i)
				victims = append(victims, v)
				w.phase[v] = tc.phase
				w.stuck[v] = stuck{reason: tc.reason, message: "no room"}
			}
			out := w.step()
			ev := findEvent(out.Events, events.ReasonPlacementFallback)
			switch {
			case tc.to == -2 && ev != nil:
				t.Fatalf("a fallback event: %+v", ev)
			case tc.to != -2 && (ev == nil || ev.Pool.Fallback.To != tc.to):
				t.Fatalf("fallback event %+v, want to %d", ev, tc.to)
			}
			w.settle()
			_, still := w.owned[victims[0]]
			if still == tc.moved {
				t.Fatalf("stuck member still there: %v, want moved %v (members %v)", still, tc.moved, w.members())
			}
			if tc.moved {
				for n := range w.owned {
					if placementOfMember(w, n) == tc.stuckAt[0] && n != victims[0] && w.phase[n] != events.PhaseReady {
						t.Fatalf("a new member went to the held placement: %s", n)
					}
				}
			}
		})
	}
}

// A hold is in the record: a controller taking over (a plan with only the record) keeps new
// members away from the placement without seeing the stuck member again.
func TestPlanQuotaHoldSurvivesTakeover(t *testing.T) {
	w := newWorld(t, strings.Replace(twoPlaces, "%d", "2", 1))
	w.stuck = map[string]stuck{}
	w.settle()
	victim := firstAt(w, 0)
	w.phase[victim] = events.PhaseWaiting
	w.stuck[victim] = stuck{reason: events.ReasonQuota, message: "no room"}
	w.settle()
	w.stuck = map[string]stuck{} // a new controller's view: the stuck member is gone
	w.spec = poolSpec(t, strings.Replace(twoPlaces, "%d", "4", 1))
	w.settle()
	if got := perPlacement(w); got[0] != 0 || got[1] != 4 {
		t.Fatalf("members per placement %v, want every new one at placement 1", got)
	}
}
