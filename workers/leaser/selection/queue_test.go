package selection_test

import (
	"testing"
	"time"

	"github.com/egressd/egressd/workers/leaser/selection"
)

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b map[string]string
		want bool
	}{
		{nil, nil, true},
		{nil, map[string]string{"geo": "de"}, true},
		{map[string]string{"geo": "de"}, map[string]string{"geo": "de"}, true},
		{map[string]string{"geo": "de"}, map[string]string{"geo": "us"}, false},
		{map[string]string{"geo": "de"}, map[string]string{"tier": "a"}, true},
		{map[string]string{"geo": "de", "tier": "a"}, map[string]string{"geo": "de", "tier": "b"}, false},
		{map[string]string{"geo": "de", "tier": "a"}, map[string]string{"tier": "a"}, true},
	} {
		if got, back := selection.Overlap(c.a, c.b), selection.Overlap(c.b, c.a); got != c.want || back != c.want {
			t.Errorf("Overlap(%v, %v) = %v, %v; want %v", c.a, c.b, got, back, c.want)
		}
	}
}

// Whose turn it is: older live waiters whose selectors overlap are ahead; a waiter of a dead
// replica or past its deadline is not; a waiter the queue does not hold yet has every
// competing live waiter ahead.
func TestQueuePlace(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	q := selection.NewQueue()
	q.SetReplica("r1", true)
	q.SetReplica("r2", true)
	for _, w := range []selection.QueuedWaiter{
		{Key: "wait.a", Rev: 10, Replica: "r1", Selector: map[string]string{"geo": "de"}, Deadline: later},
		{Key: "wait.b", Rev: 11, Replica: "r2", Selector: map[string]string{"geo": "us"}, Deadline: later},
		{Key: "wait.c", Rev: 12, Replica: "r2", Deadline: later},
		{Key: "wait.d", Rev: 13, Replica: "r3", Selector: map[string]string{"geo": "de"}, Deadline: later}, // r3 has no heartbeat
		{Key: "wait.e", Rev: 14, Replica: "r1", Selector: map[string]string{"geo": "de"}, Deadline: now},   // past its deadline
		{Key: "wait.f", Rev: 15, Replica: "r1", Selector: map[string]string{"geo": "de"}, Deadline: later},
	} {
		q.SetWaiter(w, true)
	}
	for _, c := range []struct {
		key   string
		sel   map[string]string
		ahead int
	}{
		{"wait.a", map[string]string{"geo": "de"}, 0},
		{"wait.b", map[string]string{"geo": "us"}, 0},
		{"wait.c", nil, 2},
		{"wait.f", map[string]string{"geo": "de"}, 2},        // a and c; not the dead d nor the expired e
		{"", map[string]string{"geo": "us"}, 2},              // a newcomer: b and c
		{"", map[string]string{"geo": "fr", "tier": "x"}, 1}, // only c's empty selector
	} {
		p := q.PlaceOf(c.key, c.sel, now)
		if p.Ahead != c.ahead || p.Waiting != 4 {
			t.Errorf("%s %v: %+v, want %d ahead of 4 waiting", c.key, c.sel, p, c.ahead)
		}
	}
	dead := q.Dead()
	if len(dead) != 1 || dead[0].Key != "wait.d" {
		t.Errorf("dead %+v, want wait.d", dead)
	}
	q.SetReplica("r1", false)
	q.SetWaiter(selection.QueuedWaiter{Key: "wait.a"}, false)
	if p := q.PlaceOf("wait.c", nil, now); p.Ahead != 1 || p.Waiting != 2 {
		t.Errorf("after a's removal and r1's heartbeat lapsed: %+v, want 1 ahead (b) of 2 waiting", p)
	}
	if dead := q.Dead(); len(dead) != 3 || dead[0].Key != "wait.d" || dead[1].Key != "wait.e" || dead[2].Key != "wait.f" {
		t.Errorf("dead %+v, want d, e, f in order (r1 and r3 gone)", dead)
	}
}

// A record taken over by a retry of its acquire keeps the first try's place (Place), though
// its revision is now the newest.
func TestQueueTakenOverRecordKeepsItsPlace(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	q := selection.NewQueue()
	q.SetReplica("r1", true)
	q.SetWaiter(selection.QueuedWaiter{Key: "wait.old", Rev: 10, Replica: "r1", Deadline: later}, true)
	q.SetWaiter(selection.QueuedWaiter{Key: "wait.new", Rev: 11, Replica: "r1", Deadline: later}, true)
	q.SetWaiter(selection.QueuedWaiter{Key: "wait.old", Rev: 12, Place: 10, Replica: "r1", Deadline: later}, true)
	if p := q.PlaceOf("wait.old", nil, now); p.Ahead != 0 {
		t.Errorf("the taken-over record: %d ahead, want 0 (its place is 10)", p.Ahead)
	}
	if p := q.PlaceOf("wait.new", nil, now); p.Ahead != 1 {
		t.Errorf("the later waiter: %d ahead, want 1", p.Ahead)
	}
}
