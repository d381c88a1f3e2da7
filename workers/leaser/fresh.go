package leaser

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// Views that stand still (decision 100). A replica's view of a lease shard comes from a
// watch, an ordered consumer that lives on one server. When that server dies, the SDK
// notices only at its next activity check (twice its 5 s idle heartbeat), and its new
// consumer needs the JetStream meta leader, which is being elected if the server that died
// led it: the view of the shard then stands still for 10 s or more. A view that stands still
// misses the other replicas' releases and the expiries, fills up, and the replica answers
// "no proxy available" while the shard has free slots (issue 31: 1,594 such answers in one
// kill of the meta leader, and a 6.2 s gap in grants when every replica's view stood still).
//
// A replica knows when its view of a shard stands still: its own writes (grants and
// renewals, which return the revision they wrote) do not come back. The watch echoes them
// within milliseconds; once the oldest write not echoed is echoWait (500 ms) old, the shard is stale,
// and until the watch has echoed every write, the replica reads the slots of its full
// proxies in that shard every resyncEvery with batched direct gets (kvstore.LastEntries:
// any replica of the stream answers, no consumer is needed) and folds them into the view as
// the watch would. The view's revisions keep what the watch brings later from undoing what a
// read found; a read that lags behind the view can only make a slot look free that is not,
// which costs a Create that fails, never a second holder.

const (
	// echoWait is how long the oldest unechoed write may wait for its echo before the view
	// of its shard counts as standing still: far above an echo's few milliseconds on a
	// loaded machine (a wrong guess costs only a few direct reads), far below the 10 s the
	// SDK takes to notice a lost consumer.
	echoWait = 500 * time.Millisecond
	// resyncEvery is how often a stale shard's full proxies are read again.
	resyncEvery = 250 * time.Millisecond
	// resyncBatch bounds the slot keys one read may match (the server refuses a read of more
	// than kvstore.MaxLastEntries; the margin is for slots above a shrunk maxLeases).
	resyncBatch = kvstore.MaxLastEntries / 2
	// resyncReads bounds the reads of one pass over a stale shard; at fleet size the next
	// pass goes on after the last proxy this one read.
	resyncReads = 4
	// maxPending bounds the writes remembered per shard while their echoes are missing: the
	// oldest is what counts, newer ones past the bound are not remembered.
	maxPending = 1024
)

// FreshnessObserver hears when a view of a lease shard starts and stops standing still, and
// of each direct read it makes meanwhile (metrics). *metrics.Metrics implements it; the
// Config's Observer is asked for it.
type FreshnessObserver interface {
	ObserveViewStill(bucket string, still bool)
	ObserveDirectRead(bucket, result string)
}

type noFreshnessObserver struct{}

func (noFreshnessObserver) ObserveViewStill(string, bool)    {}
func (noFreshnessObserver) ObserveDirectRead(string, string) {}

func (l *Leaser) freshnessObserver() FreshnessObserver {
	if o, ok := l.cfg.Observer.(FreshnessObserver); ok {
		return o
	}
	return noFreshnessObserver{}
}

// freshness follows, per lease shard, whether the watch echoes this replica's own writes.
type freshness struct {
	shards []echoes
	// Owned by the resync goroutine.
	stale  []bool   // what the last pass found, to log the changes
	warned []bool   // a failed read was logged since the shard began standing still
	cursor []string // the last proxy a pass read, per shard
}

type echoes struct {
	mu      sync.Mutex
	seen    uint64         // the newest revision the watch delivered
	pending []pendingWrite // own writes not echoed yet, oldest first
}

type pendingWrite struct {
	rev uint64
	at  time.Time
}

func newFreshness(shards int) *freshness {
	return &freshness{shards: make([]echoes, shards), stale: make([]bool, shards), warned: make([]bool, shards), cursor: make([]string, shards)}
}

// wrote records this replica's write of rev to shard at now.
func (f *freshness) wrote(shard int, rev uint64, now time.Time) {
	e := &f.shards[shard]
	e.mu.Lock()
	if rev > e.seen && len(e.pending) < maxPending {
		e.pending = append(e.pending, pendingWrite{rev, now})
	}
	e.mu.Unlock()
}

// echoed records that shard's watch delivered rev.
func (f *freshness) echoed(shard int, rev uint64) {
	e := &f.shards[shard]
	e.mu.Lock()
	e.seen = max(e.seen, rev)
	if len(e.pending) > 0 {
		e.pending = slices.DeleteFunc(e.pending, func(w pendingWrite) bool { return w.rev <= e.seen })
	}
	e.mu.Unlock()
}

// standsStill reports whether shard's oldest unechoed write is echoWait old at now.
func (f *freshness) standsStill(shard int, now time.Time) bool {
	e := &f.shards[shard]
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending) > 0 && now.Sub(e.pending[0].at) >= echoWait
}

// echoing wraps the apply of shard's watch: every entry it delivers is an echo.
func (l *Leaser) echoing(shard int, apply func(jetstream.KeyValueEntry)) func(jetstream.KeyValueEntry) {
	return func(e jetstream.KeyValueEntry) {
		apply(e)
		l.fresh.echoed(shard, e.Revision())
	}
}

// wroteSlot counts a slot this replica wrote at rev in the view, and expects its echo.
func (l *Leaser) wroteSlot(key string, rev uint64, lease events.Lease) {
	l.view.noteLease(key, rev, lease)
	l.fresh.wrote(l.cfg.Buckets.Leases.Index(lease.Proxy), rev, time.Now())
}

// resyncStale reads the full proxies of every shard whose view stands still, every
// resyncEvery, until ctx ends.
func (l *Leaser) resyncStale(ctx context.Context) {
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, kv := range l.cfg.Buckets.Leases.All() {
			stale := l.fresh.standsStill(i, time.Now())
			if stale != l.fresh.stale[i] {
				l.fresh.stale[i], l.fresh.warned[i] = stale, false
				l.freshnessObserver().ObserveViewStill(kv.Bucket(), stale)
				if stale {
					l.log.Warn("the view of a lease shard stands still (its watch echoes none of this replica's writes): reading its full proxies directly until it catches up", "bucket", kv.Bucket())
				} else {
					l.log.Info("the view of a lease shard follows its watch again", "bucket", kv.Bucket())
				}
			}
			if stale {
				l.resyncShard(ctx, i, kv)
			}
		}
	}
}

// resyncShard reads the slots of shard's full proxies, at most resyncReads batches, going
// on after the proxy the last pass read.
func (l *Leaser) resyncShard(ctx context.Context, shard int, kv jetstream.KeyValue) {
	full := l.view.fleet.Full(func(name string) bool { return l.cfg.Buckets.Leases.Index(name) == shard })
	after, _ := slices.BinarySearchFunc(full, l.fresh.cursor[shard], func(p selection.FullProxy, name string) int {
		if p.Name <= name {
			return -1
		}
		return 1
	})
	full = slices.Concat(full[after:], full[:after])
	for reads := 0; reads < resyncReads && len(full) > 0 && ctx.Err() == nil; reads++ {
		n, keys := 0, 0
		for n < len(full) && (n == 0 || keys+full[n].Held+2 <= resyncBatch) {
			keys += full[n].Held + 2
			n++
		}
		if err := l.resyncProxies(ctx, kv, full[:n], maxSplits); err != nil {
			// The next pass tries again: a read that gets no answer has waited its whole
			// budget, and the next would too.
			if !l.fresh.warned[shard] && ctx.Err() == nil {
				l.fresh.warned[shard] = true
				l.log.Warn("the direct read of a lease shard whose view stands still failed; tried again every pass", "bucket", kv.Bucket(), "err", err)
			}
			return
		}
		l.fresh.cursor[shard] = full[n-1].Name
		full = full[n:]
	}
}

// maxSplits bounds how often resyncProxies splits a read the server refuses as too big: a
// batch of resyncBatch keys is far under the server's limit, so only slots far above a
// shrunk maxLeases get there, and the library reports other statuses the same way.
const maxSplits = 3

// resyncProxies reads the slots of proxies in kv and folds them into the view as the watch
// would; a read the server refuses as too big is split in two, at most splits deep.
func (l *Leaser) resyncProxies(ctx context.Context, kv jetstream.KeyValue, proxies []selection.FullProxy, splits int) error {
	filters := make([]string, len(proxies))
	for i, p := range proxies {
		filters[i] = p.Name + ".*"
	}
	rctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
	es, err := kvstore.LastEntries(rctx, l.cfg.Buckets.JS, kv, filters)
	cancel()
	if err != nil {
		l.freshnessObserver().ObserveDirectRead(kv.Bucket(), "error")
		if errors.Is(err, kvstore.ErrTooManyKeys) && len(proxies) > 1 && splits > 0 && ctx.Err() == nil {
			half := len(proxies) / 2
			return errors.Join(l.resyncProxies(ctx, kv, proxies[:half], splits-1), l.resyncProxies(ctx, kv, proxies[half:], splits-1))
		}
		return err
	}
	l.freshnessObserver().ObserveDirectRead(kv.Bucket(), "ok")
	apply := l.waking(l.applyLease)
	read := make(map[string]bool, len(es))
	var top uint64
	for _, e := range es {
		read[e.Key()] = true
		top = max(top, e.Revision())
		apply(e)
	}
	// A slot the view holds that has no message left (its marker expired too) and that is
	// older than what the read saw was gone when the read was made.
	type gone struct {
		key string
		rev uint64
	}
	var gones []gone
	for _, p := range proxies {
		l.view.fleet.HeldSlots(p.Name, func(_ selection.Heard, s selection.Slot) {
			if key := events.SlotKey(p.Name, s.Lease.Slot); !read[key] && s.Rev < top {
				gones = append(gones, gone{key, s.Rev})
			}
		})
	}
	for _, g := range gones {
		l.view.noteReleased(g.key, g.rev)
	}
	if len(gones) > 0 {
		l.wake.signal()
	}
	return nil
}
