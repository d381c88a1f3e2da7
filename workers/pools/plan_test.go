package pools

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func poolSpec(t *testing.T, doc string) *schemas.PoolSpec {
	t.Helper()
	s, err := schemas.ParsePoolSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// world is a pool's surroundings for plan: members in the ledger and in proxies, their
// phases and leases.
type world struct {
	t       *testing.T
	spec    *schemas.PoolSpec
	ledger  *events.PoolStatus
	owned   map[string]owned
	taken   map[string]bool
	phase   map[string]events.Phase
	limited map[string]string
	leases  map[string]int
	blocked map[string]int
	expiry  map[string]expiry
	stuck   map[string]stuck
	boot    map[string]time.Duration
	stale   map[string]events.Reason // outdated members, as the reconciler marks them
	paused  bool                     // the pool's rollout is paused
	egress  map[string]egress        // where members leave from (quarantine)
	quar    []events.Quarantine      // address_quarantine: what the plans wrote
	now     time.Time
	next    int
}

func newWorld(t *testing.T, doc string) *world {
	return &world{t: t, spec: poolSpec(t, doc), owned: map[string]owned{}, taken: map[string]bool{},
		phase: map[string]events.Phase{}, limited: map[string]string{}, leases: map[string]int{}, blocked: map[string]int{}, now: t0,
		egress: map[string]egress{}}
}

func (w *world) input() input {
	return input{Name: "web", Spec: w.spec, SpecRev: 1, Ledger: w.ledger, Owned: w.owned,
		Taken: func(n string) bool { _, own := w.owned[n]; return w.taken[n] && !own },
		InUse: func(n string) bool { return w.taken[n] }, Phase: w.phase, Limited: w.limited, Leases: w.leases, Blocked: w.blocked, Expiry: w.expiry, Now: w.now,
		Stuck: w.stuck, Boot: w.boot, Outdated: w.stale, RolloutPaused: w.paused, Egress: w.egress, Quarantine: w.quar,
		NewSuffix: func() string { w.next++; return fmt.Sprintf("m%04d", w.next) }}
}

// step plans once and applies the outcome as the controller and a perfect reconciler would:
// writes land, new members become Ready at once.
func (w *world) step() outcome {
	out := plan(w.input())
	w.apply(out)
	return out
}

// apply lands an outcome of plan.
func (w *world) apply(out outcome) {
	before := len(w.owned)
	w.ledger = out.Ledger
	w.quar = append(w.quar, out.Quarantine...)
	rev := uint64(100 * w.next)
	for _, wr := range out.Writes {
		rev++
		if wr.spec == nil {
			delete(w.owned, wr.name)
			delete(w.taken, wr.name)
			continue
		}
		s, err := schemas.ParseProxySpec(wr.spec)
		if err != nil {
			w.t.Fatalf("plan wrote an invalid spec for %s: %v", wr.name, err)
		}
		w.owned[wr.name], w.taken[wr.name] = owned{rev: rev, spec: &s}, true
		if _, ok := w.phase[wr.name]; !ok {
			w.phase[wr.name] = events.PhaseReady
		}
		for i := range w.ledger.Members {
			if w.ledger.Members[i].Name == wr.name {
				w.ledger.Members[i].Rev = rev
			}
		}
		if w.t.Failed() {
			return
		}
	}
	if w.ledger != nil {
		w.ledger.Members = slices.DeleteFunc(w.ledger.Members, func(m events.PoolMember) bool {
			_, ok := w.owned[m.Name]
			return m.Deleting && !ok
		})
	}
	for n, s := range w.owned {
		if s.spec.Drain && w.phase[n] == events.PhaseReady {
			w.phase[n] = events.PhaseDraining
		}
	}
	// Lowering replicas leaves the surplus draining; nothing is ever created above the cap.
	if w.spec != nil && len(w.owned) > max(before, w.spec.MaxMembers()) {
		w.t.Fatalf("%d members, above the cap %d", len(w.owned), w.spec.MaxMembers())
	}
}

// settle steps until nothing changes, advancing the clock a little each time.
func (w *world) settle() {
	for range 50 {
		var prev *events.PoolStatus
		if w.ledger != nil {
			c := *w.ledger
			c.Members = slices.Clone(c.Members)
			prev = &c
		}
		out := w.step()
		changed := (prev == nil) != (w.ledger == nil) || (prev != nil && !sameLedger(*prev, *w.ledger))
		if testing.Verbose() {
			w.t.Logf("at %s: events %v writes %d members %v", w.now.Sub(t0), reasons(out), len(out.Writes), w.members())
		}
		w.now = w.now.Add(drainSettle)
		if len(out.Writes) == 0 && len(out.Events) == 0 && !changed {
			return
		}
	}
	w.t.Fatal("the pool never settled")
}

func (w *world) members() []string { return sortedKeys(w.owned) }

func (w *world) readyCount() int {
	n := 0
	for name := range w.owned {
		if w.phase[name] == events.PhaseReady {
			n++
		}
	}
	return n
}

func reasons(out outcome) []events.Reason {
	var rs []events.Reason
	for _, e := range out.Events {
		rs = append(rs, e.Reason)
	}
	return rs
}

func TestScaleUpAndDown(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":10}`)
	w.settle()
	if got := len(w.members()); got != 10 {
		t.Fatalf("%d members, want 10", got)
	}
	for _, n := range w.members() {
		s := w.owned[n].spec
		if !strings.HasPrefix(n, "web-") || s.Pool != "web" || s.Attributes["pool"] != "web" || s.Drain {
			t.Fatalf("member %s: %+v", n, s)
		}
	}
	if w.ledger.Phase != events.PoolReady {
		t.Fatalf("phase %s, want Ready", w.ledger.Phase)
	}
	// Two members hold leases; scaling to 4 removes 6 of the other 8, oldest first.
	leased := w.members()[:2]
	for _, n := range leased {
		w.leases[n] = 1
	}
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":4}`)
	w.step()
	w.now = w.now.Add(drainSettle)
	w.settle()
	got := w.members()
	if len(got) != 4 {
		t.Fatalf("members %v, want 4", got)
	}
	for _, n := range leased {
		if _, ok := w.owned[n]; !ok {
			t.Fatalf("leased member %s was removed while unleased ones remained: %v", n, got)
		}
	}
	// Scale to 0 drains the leased ones, which go when their leases do.
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":0}`)
	w.settle()
	if got := w.members(); len(got) != 2 {
		t.Fatalf("members %v, want the 2 leased ones draining", got)
	}
	for _, n := range leased {
		if !w.owned[n].spec.Drain {
			t.Fatalf("%s not drained", n)
		}
		w.leases[n] = 0
	}
	w.settle()
	if got := w.members(); len(got) != 0 {
		t.Fatalf("members %v, want none", got)
	}
}

func TestHandEditsAndLookalikes(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	m := w.members()[0]
	edited, _ := schemas.ParseProxySpec([]byte(`{"provider":"local","pool":"web","maxLeases":9}`))
	w.owned[m] = owned{rev: 9999, spec: &edited}
	out := w.step()
	if !slices.ContainsFunc(out.Writes, func(wr write) bool { return wr.name == m && wr.reason == events.ReasonMemberReverted }) {
		t.Fatalf("writes %+v, want a revert of %s", out.Writes, m)
	}
	if *w.owned[m].spec.MaxLeases != 1 {
		t.Fatal("not reverted")
	}
	// A key with the pool's prefix but no owner is someone else's: never touched, never counted.
	w.taken["web-lookalike"] = true
	w.settle()
	if len(w.members()) != 2 {
		t.Fatalf("members %v", w.members())
	}
	// A member disowned by hand is left alone and replaced.
	delete(w.owned, m)
	out = w.step()
	if !slices.Contains(reasons(out), events.ReasonMemberLost) {
		t.Fatalf("events %v, want MemberLost", reasons(out))
	}
	w.settle()
	if len(w.members()) != 2 || slices.Contains(w.members(), m) {
		t.Fatalf("members %v", w.members())
	}
}

func TestAdoptionRespectsTheCap(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2,"rotation":{"maxSurge":1}}`)
	for i := range 5 {
		s, _ := schemas.ParseProxySpec([]byte(`{"provider":"local","pool":"web"}`))
		n := fmt.Sprintf("web-x%d", i)
		w.owned[n], w.taken[n] = owned{rev: uint64(i + 1), spec: &s}, true
	}
	out := plan(w.input())
	if got := len(out.Ledger.Members); got != 3 {
		t.Fatalf("ledger has %d members, want the cap 3", got)
	}
	deletes := 0
	for _, wr := range out.Writes {
		if wr.spec == nil {
			deletes++
		}
	}
	if deletes != 2 {
		t.Fatalf("%d deletes, want the 2 above the cap", deletes)
	}
}

func TestInvalidPoolDoesNothing(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	in := w.input()
	in.Spec, in.SpecErr = nil, errors.New("replicas: must be between 0 and 1000, got -1")
	out := plan(in)
	if len(out.Writes) != 0 || out.Ledger.Phase != events.PoolInvalid || !strings.Contains(out.Ledger.Message, "replicas") {
		t.Fatalf("outcome %+v", out)
	}
	if len(out.Ledger.Members) != 2 {
		t.Fatal("an invalid spec dropped members from the ledger")
	}
	if len(out.Events) != 1 || out.Events[0].Reason != events.ReasonInvalidSpec || !strings.Contains(out.Events[0].Message, "replicas") {
		t.Fatalf("events of a pool turning Invalid: %+v", out.Events)
	}
	// The event is news once: the next pass records the same and says nothing; another
	// problem is news again.
	in.Ledger = out.Ledger
	if again := plan(in); len(again.Events) != 0 || again.Ledger.Phase != events.PoolInvalid {
		t.Fatalf("a pass over the same invalid spec: %+v", again)
	}
	in.SpecErr, in.SpecReason = errors.New(`template.provider: unknown provider "nope" (known: local)`), events.ReasonUnknownProvider
	other := plan(in)
	if len(other.Events) != 1 || other.Events[0].Reason != events.ReasonUnknownProvider || other.Ledger.Reason != events.ReasonUnknownProvider {
		t.Fatalf("a new problem: %+v", other)
	}
}

func TestRefusedIsTheReconcilersRule(t *testing.T) {
	cat := schemas.Catalog{"local": {Hosts: []string{"local"}}, "kvm": {Hosts: []string{"h1"}}}
	for _, tc := range []struct {
		doc    string
		reason events.Reason
	}{
		{`{"template":{"provider":"local"},"replicas":1}`, ""},
		{`{"template":{"provider":"nope"},"replicas":1}`, events.ReasonUnknownProvider},
		{`{"template":{"provider":"kvm","placement":{"zone":"h9"}},"replicas":1}`, events.ReasonInvalidPlacement},
		// No member is made with the template's provider: every placement names its own.
		{`{"template":{"provider":"nope"},"replicas":1,"placements":[{"provider":"local"}]}`, ""},
		{`{"template":{"provider":"local"},"replicas":1,"placements":[{"provider":"kvm","zone":"h9"},{"provider":"gone"}]}`, events.ReasonUnknownProvider},
	} {
		reason, err := refused(*poolSpec(t, tc.doc), cat)
		if reason != tc.reason || (err == nil) != (tc.reason == "") {
			t.Errorf("%s: %q, %v; want %q", tc.doc, reason, err, tc.reason)
		}
	}
}

func TestDeletedPoolDeletesItsMembers(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":3}`)
	w.settle()
	w.spec = nil
	w.step()
	if len(w.owned) != 0 {
		t.Fatalf("members left: %v", w.members())
	}
	out := plan(w.input())
	if out.Ledger == nil || out.Ledger.Phase != events.PoolDeleting || len(out.Ledger.Members) != 0 {
		t.Fatalf("ledger %+v, want an empty Deleting tombstone first", out.Ledger)
	}
	w.ledger = out.Ledger
	w.now = w.now.Add(tombstoneFor)
	if out := plan(w.input()); out.Ledger != nil {
		t.Fatalf("ledger %+v, want the record deleted after the tombstone time", out.Ledger)
	}
}

func TestSpread(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":5,"placements":[{"zone":"a"},{"zone":"b"}]}`)
	w.settle()
	per := map[string]int{}
	for _, n := range w.members() {
		per[w.owned[n].spec.Placement.Zone]++
	}
	if per["a"] != 3 || per["b"] != 2 {
		t.Fatalf("round-robin spread %v, want a:3 b:2", per)
	}
	l := newWorld(t, `{"template":{"provider":"local"},"replicas":2,"spread":"least-loaded","placements":[{"zone":"a"},{"zone":"b"}]}`)
	in := l.input()
	in.Load = func(_, zone string) int { return map[string]int{"a": 10, "b": 0}[zone] }
	out := plan(in)
	for _, m := range out.Ledger.Members {
		if m.Placement != 1 {
			t.Fatalf("least-loaded put a member at placement %d, want 1 (zone b)", m.Placement)
		}
	}
	// The members a pass creates count towards the load of their placement.
	l.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":4,"spread":"least-loaded","placements":[{"zone":"a"},{"zone":"b"}]}`)
	in = l.input()
	in.Load = func(_, zone string) int { return map[string]int{"a": 1, "b": 0}[zone] }
	byIdx := map[int]int{}
	for _, m := range plan(in).Ledger.Members {
		byIdx[m.Placement]++
	}
	if byIdx[0] != 2 || byIdx[1] != 2 {
		t.Fatalf("least-loaded spread %v over loads a:1 b:0, want 2 and 2 (b first, then even)", byIdx)
	}
}

// Specs that name a pool which has neither a spec nor a ledger were not made by a pool: they
// are left alone, whatever their name.
func TestSpecsNamingAnUnknownPoolAreLeftAlone(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":1}`)
	s, _ := schemas.ParseProxySpec([]byte(`{"provider":"local","pool":"web"}`))
	w.owned["mine"], w.taken["mine"] = owned{rev: 3, spec: &s}, true
	in := w.input()
	in.Spec = nil
	if out := plan(in); len(out.Writes) != 0 || out.Ledger != nil || len(out.Events) != 0 {
		t.Fatalf("outcome %+v, want nothing done", out)
	}
}

// A create a stale controller still had in flight when the pool was deleted lands after the
// members are gone: the tombstone ledger gets it deleted.
func TestLateCreateAfterPoolDeletionIsDeleted(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local"},"replicas":2}`)
	w.settle()
	w.spec = poolSpec(t, `{"template":{"provider":"local"},"replicas":3}`)
	a := plan(w.input()) // a stale controller records a new member, its create in flight
	w.ledger = a.Ledger
	var late write
	for _, wr := range a.Writes {
		if wr.rev == 0 && wr.spec != nil {
			late = wr
		}
	}
	w.spec = nil
	for range 5 {
		w.step()
	}
	s, _ := schemas.ParseProxySpec(late.spec)
	w.owned[late.name], w.taken[late.name] = owned{rev: 999, spec: &s}, true
	out := plan(w.input())
	if !slices.ContainsFunc(out.Writes, func(wr write) bool { return wr.name == late.name && wr.spec == nil }) {
		t.Fatalf("member %s created after the pool's members went is not deleted: %+v", late.name, out.Writes)
	}
}
