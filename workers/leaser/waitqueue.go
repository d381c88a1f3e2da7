package leaser

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// The queue of waiting acquires in lease_state (docs/leases.md#waiting). Each waiting acquire
// writes wait.<id> with a Create: its KV revision places it among the waiters of every
// replica, and its TTL outlasts its deadline by waitRecordMargin, so that a replica killed
// with waiters leaves records that expire by themselves. A replica with waiters heartbeats
// waiting.<replica> (heartbeatEvery, TTL heartbeatTTL); every replica's view follows both, and
// a waiter whose replica has no heartbeat is skipped by the others and removed by the first
// to notice (collectDead). The order itself is selection.Queue's.

const (
	waitPrefix    = "wait."
	waitingPrefix = "waiting."

	heartbeatEvery   = time.Second
	heartbeatTTL     = 5 * time.Second
	waitRecordMargin = 2 * time.Second
)

// noteWait folds a wait.<id> or waiting.<replica> entry into the queue. Callers hold mu.
func (v *view) noteWait(key string, rev uint64, on bool, value []byte) {
	if replica, ok := strings.CutPrefix(key, waitingPrefix); ok {
		v.waits.SetReplica(replica, on)
		return
	}
	var rec events.Waiter
	if on && json.Unmarshal(value, &rec) != nil {
		// Unreadable: it competes with nobody and is removed as dead.
		rec = events.Waiter{}
	}
	v.waits.SetWaiter(selection.QueuedWaiter{Key: key, Rev: rev, Place: rec.Place, Replica: rec.Replica, Selector: rec.Selector,
		Deadline: rec.Deadline}, on)
}

// wakeup tells the waiters of this replica that something they wait for may have changed:
// a slot freed, a proxy's status, spec or cooldown, or the queue. A waiter takes the channel
// before it looks, and the next signal closes it. With no waiter a signal costs an atomic
// load.
type wakeup struct {
	waiting atomic.Int64 // this replica's waiting acquires
	mu      sync.Mutex
	ch      chan struct{}
}

func newWakeup() *wakeup { return &wakeup{ch: make(chan struct{})} }

func (w *wakeup) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *wakeup) signal() {
	if w.waiting.Load() == 0 {
		return
	}
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// waking wraps a watch's apply so that each entry it applies wakes the waiters.
func (l *Leaser) waking(apply func(e jetstream.KeyValueEntry)) func(e jetstream.KeyValueEntry) {
	return func(e jetstream.KeyValueEntry) {
		apply(e)
		l.wake.signal()
	}
}

// heartbeat keeps waiting.<replica> alive while this replica has waiters, and removes the
// records of waiters whose replica died, until ctx ends.
func (l *Leaser) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.wake.waiting.Load() > 0 {
			if err := l.beat(ctx, false); err != nil {
				l.log.Warn("waiting heartbeat; other replicas may skip this one's waiters", "err", err)
			}
		}
		// Not before the view is complete: the initial values come in revision order, and a
		// heartbeat rewritten since a waiter's record was written comes after that record.
		select {
		case <-l.ready:
			l.collectDead(ctx)
		default:
		}
	}
}

// beat writes the heartbeat, unless (lazy) one was written less than heartbeatEvery ago: a
// waiter's record must never reach another replica before its replica's heartbeat does.
func (l *Leaser) beat(ctx context.Context, lazy bool) error {
	l.hbMu.Lock()
	defer l.hbMu.Unlock()
	if lazy && time.Since(l.hbAt) < heartbeatEvery {
		return nil
	}
	b, err := json.Marshal(events.WaitingReplica{V: 1, Worker: l.cfg.Worker, Waiting: int(l.wake.waiting.Load()), At: l.now()})
	if err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
	defer cancel()
	key := waitingPrefix + l.stats.member
	at := time.Now()
	rev, err := kvstore.PutTTL(bctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, key, b, 0, heartbeatTTL)
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	l.hbAt = at
	l.view.noteState(key, rev, true, b)
	return nil
}

// collectDead removes the records of waiters whose replica has no heartbeat: they wait for
// nobody. A conflict or a miss means another replica was first, or the record expired.
func (l *Leaser) collectDead(ctx context.Context) {
	for _, w := range l.view.waits.Dead() {
		dctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
		err := kvstore.DeleteAt(dctx, l.cfg.Buckets.LeaseState, w.Key, w.Rev)
		cancel()
		switch {
		case err == nil:
			l.view.noteStateGone(w.Key, w.Rev)
			l.log.Info("removed the record of a waiting acquire whose leaser is gone", "key", w.Key)
		case errors.Is(err, kvstore.ErrConflict), errors.Is(err, kvstore.ErrNotFound):
		default:
			l.log.Warn("remove the record of a dead waiter; it expires by itself", "key", w.Key, "err", err)
			return
		}
	}
}

// enqueue writes w's record (after this replica's heartbeat) and counts it as waiting. A
// waiter with a request ID has the record wait.<its request hash>: a retry of a waiting
// acquire takes over the record of its earlier try, and its place, instead of queueing twice.
func (l *Leaser) enqueue(ctx context.Context, w *waiter) error {
	if err := l.beat(ctx, true); err != nil {
		return err
	}
	w.key = waitPrefix + newToken()
	if w.idem != nil {
		w.key = waitPrefix + strings.TrimPrefix(w.idem.key, "request.")
	}
	rec := events.Waiter{V: 1, Replica: l.stats.member, Worker: l.cfg.Worker, Holder: w.r.Holder, Selector: w.r.Selector,
		Target: w.r.Target, Since: w.sinceWall, Deadline: w.deadlineWall}
	ttl := time.Until(w.deadline) + waitRecordMargin
	ttl = max(ttl.Truncate(time.Second)+time.Second, time.Second)
	var prev uint64 // the revision of the record taken over
	for range casRetries + 1 {
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		rev, err := kvstore.WriteTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, w.key, b, prev, ttl)
		if errors.Is(err, kvstore.ErrConflict) && w.idem != nil {
			// An earlier try of this request waits (or waited) here: this one takes its place.
			prev, rec.Place, err = l.waitPlace(ctx, w.key)
			if err == nil {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", w.key, err)
		}
		w.rev = rev
		l.view.noteState(w.key, rev, true, b)
		return nil
	}
	return fmt.Errorf("write %s: it kept changing", w.key)
}

// waitPlace reads the waiter record key: its revision, and the place it holds in the queue.
// A record gone meanwhile is created anew (revision 0).
func (l *Leaser) waitPlace(ctx context.Context, key string) (rev, place uint64, err error) {
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, key)
	if errors.Is(err, kvstore.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var old events.Waiter
	_ = json.Unmarshal(raw, &old) // unreadable: its own revision is its place
	return rev, cmp.Or(old.Place, rev), nil
}

// superseded: a retry of w's acquire took over its record since w wrote it.
func (l *Leaser) superseded(w *waiter) bool {
	qw, ok := l.view.waits.Waiter(w.key)
	return ok && w.rev != 0 && qw.Rev > w.rev
}

// dequeue deletes w's record; if that fails it expires with its TTL, and others skip it once
// its deadline passed.
func (l *Leaser) dequeue(w *waiter) {
	if w.rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestBudget)
	defer cancel()
	if err := kvstore.DeleteAt(ctx, l.cfg.Buckets.LeaseState, w.key, w.rev); err != nil && !errors.Is(err, kvstore.ErrConflict) && !errors.Is(err, kvstore.ErrNotFound) {
		l.log.Warn("remove a waiting acquire's record; it expires by itself", "key", w.key, "err", err)
		return
	}
	l.view.noteStateGone(w.key, w.rev)
	w.rev = 0
}
