package leaser

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// Demand measured where it happens (issue 23 item 2, docs/pools.md#demand): every replica
// counts, per scope, the acquires it refused for want of a free proxy, the leases it granted
// and the acquires waiting on it, over a sliding window, and writes one record per scope to
// pool_demand every interval with a TTL of a few intervals, so that the demand of a replica
// that died fades on its own. A scope is each pool whose members the acquire's selector can
// match (judged on the pool's template, so that an empty pool still hears of the acquires it
// could serve), or the selector itself when it matches no pool.

// Defaults of the demand records.
const (
	DefaultDemandWindow   = 30 * time.Second
	DefaultDemandInterval = 2 * time.Second
)

// demandTTLIntervals is how many publish intervals a record outlives its write.
const demandTTLIntervals = 3

// firstSpacing is the least time between two writes of the records that a first waiter
// brings forward (demandWriter.run).
const firstSpacing = 100 * time.Millisecond

// demandBook is the counting, without I/O: safe for concurrent use.
type demandBook struct {
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	pools  map[string]map[string]string // pool → its members' attributes (template + pool=name)
	scopes map[string]*scopeDemand

	// first is signalled when a scope gets its first waiter: the writer writes at once
	// rather than at its next interval, so that a pool at zero members starts to grow as soon
	// as an acquire waits for it (an interval is most of the wait when members boot fast).
	first chan struct{}
}

type scopeDemand struct {
	pool     string
	selector map[string]string
	waiting  int
	grants   map[int64]int        // unix second → grants
	anon     map[int64]int        // unix second → refusals of acquires without a holder
	holders  map[string]time.Time // holder → its last refusal
	// wrote says the last record written had something in it: one record of zeros follows,
	// then nothing until there is demand again (the TTL removes the zeros).
	wrote bool
}

func newDemandBook(window time.Duration, now func() time.Time) *demandBook {
	return &demandBook{window: window, now: now, pools: map[string]map[string]string{}, scopes: map[string]*scopeDemand{}, first: make(chan struct{}, 1)}
}

// setPool records pool's member attributes (nil: the pool is gone or invalid).
func (b *demandBook) setPool(pool string, spec *schemas.PoolSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if spec == nil {
		delete(b.pools, pool)
		return
	}
	attrs := maps.Clone(spec.Template.Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs[schemas.PoolAttribute] = pool
	b.pools[pool] = attrs
}

// scopesOf is the scopes an acquire with sel counts towards, created as needed. b.mu is held.
func (b *demandBook) scopesOf(sel map[string]string) []*scopeDemand {
	var out []*scopeDemand
	for pool, attrs := range b.pools {
		if selection.Matches(attrs, sel) {
			out = append(out, b.scope(pool, pool, nil))
		}
	}
	if len(out) == 0 {
		out = append(out, b.scope(events.SelectorScope(sel), "", sel))
	}
	return out
}

func (b *demandBook) scope(key, pool string, sel map[string]string) *scopeDemand {
	s := b.scopes[key]
	if s == nil {
		s = &scopeDemand{pool: pool, selector: maps.Clone(sel), grants: map[int64]int{}, anon: map[int64]int{}, holders: map[string]time.Time{}}
		b.scopes[key] = s
	}
	return s
}

// refused counts an acquire refused for want of a free proxy. A holder counts once in the
// window however often it retries: its retries are one crawler's demand, not many.
func (b *demandBook) refused(sel map[string]string, holder string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for _, s := range b.scopesOf(sel) {
		if holder != "" {
			s.holders[holder] = now
		} else {
			s.anon[now.Unix()]++
		}
	}
}

// granted counts a grant on a proxy of pool ("" when in none: then the selector's scope).
// The grant answers a refusal counted before it: its holder's, or, without a holder, one
// anonymous refusal, so that a crawler refused and then served is not counted as demand twice
// (once held, once refused) while the refusal is in the window.
func (b *demandBook) granted(pool string, sel map[string]string, holder string) {
	b.grantedAnswering(pool, sel, holder, true)
}

// grantedAnswering is granted; without answer the grant takes back no refusal (a waiter's,
// which was counted waiting instead).
func (b *demandBook) grantedAnswering(pool string, sel map[string]string, holder string, answer bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sec := b.now().Unix()
	scopes := []*scopeDemand{}
	if pool != "" {
		scopes = append(scopes, b.scope(pool, pool, nil))
	} else {
		scopes = b.scopesOf(sel)
	}
	for _, s := range scopes {
		s.grants[sec]++
		if !answer {
			continue
		}
		if holder != "" {
			delete(s.holders, holder)
		} else {
			s.answerAnon()
		}
	}
}

// answerAnon takes back the newest anonymous refusal, if any.
func (s *scopeDemand) answerAnon() {
	newest, found := int64(0), false
	for sec, n := range s.anon {
		if n > 0 && (!found || sec > newest) {
			newest, found = sec, true
		}
	}
	if found {
		if s.anon[newest]--; s.anon[newest] == 0 {
			delete(s.anon, newest)
		}
	}
}

// wait counts an acquire waiting for a slot until the returned func is called (once).
func (b *demandBook) wait(sel map[string]string) func() {
	b.mu.Lock()
	scopes := b.scopesOf(sel)
	first := false
	for _, s := range scopes {
		first = first || s.waiting == 0
		s.waiting++
	}
	b.mu.Unlock()
	if first {
		select {
		case b.first <- struct{}{}:
		default: // a write is already due
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, s := range scopes {
				s.waiting--
			}
		})
	}
}

// records is the record of every scope worth writing now, by scope, with held from counts.
// Scopes with nothing left in the window, once their zeros are written, are forgotten.
func (b *demandBook) records(member string, held func(sels map[string]map[string]string) (map[string]int, map[string]int)) map[string]events.PoolDemand {
	b.mu.Lock()
	sels := map[string]map[string]string{}
	for key, s := range b.scopes {
		if s.pool == "" {
			sels[key] = s.selector
		}
	}
	b.mu.Unlock()
	byPool, bySel := held(sels) // outside mu: it takes the fleet's lock

	b.mu.Lock()
	defer b.mu.Unlock()
	// A pool whose members hold leases has a record even when this replica saw no acquire
	// for it lately: held is demand too.
	for pool, n := range byPool {
		if _, known := b.pools[pool]; known && n > 0 {
			b.scope(pool, pool, nil)
		}
	}
	now := b.now()
	from := now.Add(-b.window)
	out := map[string]events.PoolDemand{}
	for key, s := range b.scopes {
		d := events.PoolDemand{V: 1, Leaser: member, Pool: s.pool, Selector: s.selector, WindowSeconds: int(b.window / time.Second),
			Waiting: s.waiting, At: now}
		d.Granted = sumSince(s.grants, from)
		d.Refused = sumSince(s.anon, from)
		for h, at := range s.holders {
			if at.Before(from) {
				delete(s.holders, h)
				continue
			}
			d.Refused++
		}
		if s.pool != "" {
			d.Held = byPool[s.pool]
		} else {
			d.Held = bySel[key]
		}
		d.GrantsPerSecond = float64(d.Granted) / b.window.Seconds()
		busy := d.Waiting > 0 || d.Refused > 0 || d.Granted > 0 || d.Held > 0
		switch {
		case busy || s.wrote:
			out[key] = d
			s.wrote = busy
		case s.waiting == 0 && len(s.grants) == 0 && len(s.anon) == 0 && len(s.holders) == 0:
			delete(b.scopes, key)
		}
	}
	return out
}

// sumSince adds the counts of the seconds from from on, dropping the older ones.
func sumSince(m map[int64]int, from time.Time) int {
	n, cut := 0, from.Unix()
	for sec, c := range m {
		if sec < cut {
			delete(m, sec)
			continue
		}
		n += c
	}
	return n
}

// demandWriter writes the book's records every interval.
type demandWriter struct {
	book     *demandBook
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	log      *slog.Logger
	member   string
	interval time.Duration
	held     func(map[string]map[string]string) (map[string]int, map[string]int)
}

// run writes the records every interval until ctx ends, each write within budget. A scope's
// first waiter brings a write forward, and one more firstSpacing later: the first starts a
// pool at zero members growing at once, the second counts the rest of a crowd that came at the
// same moment, so that the controller's next decision is for all of it (writes are at least
// firstSpacing apart, so waiters coming and going do not write at their rate).
func (w *demandWriter) run(ctx context.Context, budget time.Duration) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	spacing := min(firstSpacing, w.interval/4)
	var (
		last   time.Time
		soon   <-chan time.Time
		follow bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.book.first:
			if soon == nil {
				soon, follow = time.After(max(spacing-time.Since(last), 0)), true
			}
			continue
		case <-soon:
			soon = nil
			if follow {
				soon, follow = time.After(spacing), false
			}
		case <-t.C:
		}
		last = time.Now()
		wctx, cancel := context.WithTimeout(ctx, budget)
		w.flush(wctx)
		cancel()
	}
}

// flush writes one record per scope. A write that fails is logged and left to the next
// interval: demand is a measurement, and no acquire waits on it.
func (w *demandWriter) flush(ctx context.Context) {
	ttl := demandTTLIntervals * w.interval
	for scope, d := range w.book.records(w.member, w.held) {
		b, err := json.Marshal(d)
		if err != nil {
			continue
		}
		if _, err := kvstore.PutTTL(ctx, w.js, w.kv, events.DemandKey(scope, w.member), b, 0, ttl); err != nil {
			w.log.Warn("demand record not written; the next interval tries again", "scope", scope, "err", err)
		}
	}
}

// Waiting counts an acquire with selector waiting for a slot in the demand records, until the
// returned func is called (it may be called more than once; only the first counts). For the
// waiting acquires of issue 23 item 1: call it when an acquire starts to wait, and the func
// when it is answered or leaves the queue.
func (l *Leaser) Waiting(selector map[string]string) (done func()) {
	return l.demand.wait(selector)
}
