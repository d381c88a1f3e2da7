package selection

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Queue is what one replica knows of the acquires waiting for a slot on every replica
// (docs/leases.md#waiting): their records wait.<id> in lease_state, ordered by KV revision,
// and which replicas are alive (their heartbeat waiting.<replica> is there). The order of the
// waiting acquires is decided here, and only here:
//
//   - a waiter is live while its replica's heartbeat is there and its deadline has not passed;
//     a dead one is skipped (and removed by the shell);
//   - two waiters compete when their selectors overlap: some proxy could match both (every key
//     they share has the same value in both);
//   - a waiter may take a slot only when no older live waiter (lower revision) competes with
//     it: first come, first served per selector, across any number of replicas.
//
// A Queue is safe for concurrent use. It does no I/O; a stale Queue costs a waiter a turn
// taken a moment late (or a grant a moment early, never a slot over maxLeases: the slot
// Create stays the only exact step).
type Queue struct {
	mu       sync.RWMutex
	waiters  map[string]QueuedWaiter // by key
	replicas map[string]bool         // replicas with a heartbeat
}

// QueuedWaiter is one waiting acquire as the Queue knows it.
type QueuedWaiter struct {
	Key      string
	Rev      uint64 // the KV revision of its record: its order, unless Place is set
	Place    uint64 // its order when its record was taken over by a retry (the first try's)
	Replica  string
	Selector map[string]string
	Deadline time.Time
}

// NewQueue returns an empty Queue.
func NewQueue() *Queue {
	return &Queue{waiters: map[string]QueuedWaiter{}, replicas: map[string]bool{}}
}

// SetWaiter records (on) or forgets (!on) a waiter.
func (q *Queue) SetWaiter(w QueuedWaiter, on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if on {
		q.waiters[w.Key] = w
	} else {
		delete(q.waiters, w.Key)
	}
}

// SetReplica records that replica's heartbeat is there (on) or gone.
func (q *Queue) SetReplica(replica string, on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if on {
		q.replicas[replica] = true
	} else {
		delete(q.replicas, replica)
	}
}

// Waiter returns the waiter of key, if the Queue holds it.
func (q *Queue) Waiter(key string) (QueuedWaiter, bool) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	w, ok := q.waiters[key]
	return w, ok
}

// Place is where a waiter stands.
type Place struct {
	Ahead   int // older live waiters competing with it: 0 is its turn
	Waiting int // live waiters on every replica
}

// PlaceOf is where the waiter of key stands at now. A waiter the Queue does not hold (its
// record not written yet, or removed) has every competing live waiter ahead of it.
func (q *Queue) PlaceOf(key string, sel map[string]string, now time.Time) Place {
	q.mu.RLock()
	defer q.mu.RUnlock()
	me, known := q.waiters[key]
	var p Place
	for k, w := range q.waiters {
		if k == key || !q.live(w, now) {
			continue
		}
		p.Waiting++
		if (!known || w.order() < me.order()) && Overlap(w.Selector, sel) {
			p.Ahead++
		}
	}
	if known {
		p.Waiting++
	}
	return p
}

// Dead returns the waiters whose replica has no heartbeat, oldest first, for removal.
func (q *Queue) Dead() []QueuedWaiter {
	q.mu.RLock()
	defer q.mu.RUnlock()
	var out []QueuedWaiter
	for _, w := range q.waiters {
		if !q.replicas[w.Replica] {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b QueuedWaiter) int { return cmp.Compare(a.order(), b.order()) })
	return out
}

// order is w's place in the queue: lower is older.
func (w QueuedWaiter) order() uint64 { return cmp.Or(w.Place, w.Rev) }

// Len is how many waiters the Queue holds, live or not.
func (q *Queue) Len() int {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return len(q.waiters)
}

// live: w's replica heartbeats and its deadline has not passed. Callers hold mu.
func (q *Queue) live(w QueuedWaiter, now time.Time) bool {
	return q.replicas[w.Replica] && now.Before(w.Deadline)
}

// Overlap reports whether some proxy could match both selectors: every key they share has
// the same value in both. The empty selector overlaps every selector.
func Overlap(a, b map[string]string) bool {
	if len(b) < len(a) {
		a, b = b, a
	}
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return false
		}
	}
	return true
}
