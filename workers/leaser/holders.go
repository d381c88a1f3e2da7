package leaser

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// Per-holder caps (docs/leases.md#per-holder-caps). A holder may hold at most its limit of
// leases on the proxies of one pool (the pool's leases.maxPerHolder, else Config.MaxPerHolder;
// proxies in no pool count as one more scope with the default). The limit is exact across
// replicas the way maxLeases is: before its proxy slot, a capped lease takes a holder slot
// holder.<pool>.<b64url(holder)>.<n> (n below the limit) in lease_state with an atomic Create,
// so the server admits at most the limit of them. The holder slot's TTL is the lease's plus
// holdMargin, and it is renewed before and deleted after the proxy slot, so it always outlives
// its lease: a holder never has more live leases than holder slots. A leaser that dies between
// the two writes leaves a holder slot without a lease, which counts against the holder until
// its TTL (the lease's plus holdMargin) ends: the holder is held below its limit for that long,
// never above it.

// holdMargin is how much longer a holder slot lives than its lease: the TTLs are whole seconds
// on the server, and the proxy slot is written a moment after the holder slot.
const holdMargin = 2 * time.Second

// MaxPerHolderLimit bounds a holder limit, like maxLeases.
const MaxPerHolderLimit = schemas.MaxPerHolder

// holdScope is one holder's leases in one pool ("" for proxies in no pool).
type holdScope struct{ pool, holder string }

func (sc holdScope) prefix() string {
	return "holder." + cmp.Or(sc.pool, "_") + "." + base64.RawURLEncoding.EncodeToString([]byte(sc.holder))
}

func (sc holdScope) key(n int) string { return sc.prefix() + "." + strconv.Itoa(n) }

// where names the scope in a message.
func (sc holdScope) where() string {
	if sc.pool == "" {
		return "on the proxies in no pool"
	}
	return "in pool " + sc.pool
}

// parseHoldKey reads holder.<pool>.<b64url(holder)>.<n>.
func parseHoldKey(key string) (holdScope, int, bool) {
	rest, ok := strings.CutPrefix(key, "holder.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return holdScope{}, 0, false
	}
	h, err := base64.RawURLEncoding.DecodeString(parts[1])
	n, nerr := strconv.Atoi(parts[2])
	if err != nil || nerr != nil || n < 0 {
		return holdScope{}, 0, false
	}
	pool := parts[0]
	if pool == "_" {
		pool = ""
	}
	return holdScope{pool: pool, holder: string(h)}, n, true
}

// applyPool folds an entry of pools: its leases.maxPerHolder overrides the default for its
// members (candidates carry it). An invalid spec sets nothing; the pool controller reports it.
func (v *view) applyPool(e jetstream.KeyValueEntry) {
	var spec schemas.PoolSpec
	ok, valid := false, false
	if isPut(e) {
		var err error
		spec, err = schemas.ParsePoolSpec(e.Value())
		valid = err == nil
		ok = valid && spec.Leases != nil && spec.Leases.MaxPerHolder != nil
	}
	limit := 0
	if ok {
		limit = *spec.Leases.MaxPerHolder
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fleet.SetPoolCap(e.Key(), limit, ok)
	if valid && spec.Autoscale != nil {
		v.autoscaled[e.Key()] = true
	} else {
		delete(v.autoscaled, e.Key())
	}
}

// defaultStrategy is the order of an acquire that names none: packed when its selector
// names an autoscaled pool (pool=<name>), so that its leases sit on the fewest members and
// the surplus falls idle for the pool to scale down (docs/pools.md); else balanced ("").
func (v *view) defaultStrategy(sel map[string]string) events.Strategy {
	pool, ok := sel[schemas.PoolAttribute]
	if !ok {
		return ""
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.autoscaled[pool] {
		return events.StrategyPacked
	}
	return ""
}

// holdRef is a held holder slot as the view knows it.
type holdRef struct {
	rev   uint64
	token string // "" when its record was unreadable
}

// noteHold records that a holder slot is held (on, with its record) or not as of rev.
// Callers hold mu.
func (v *view) noteHold(key string, rev uint64, on bool, value []byte) {
	sc, n, ok := parseHoldKey(key)
	if !ok {
		return
	}
	m := v.holds[sc]
	if on {
		if m == nil {
			m = map[int]holdRef{}
			v.holds[sc] = m
		}
		var rec events.HolderSlot
		_ = json.Unmarshal(value, &rec)
		m[n] = holdRef{rev: rev, token: rec.Token}
		return
	}
	delete(m, n)
	if len(m) == 0 {
		delete(v.holds, sc)
	}
}

// heldRev is the revision of holder slot h as the view holds it, if it holds h's token.
func (v *view) heldRev(h *events.LeaseHold) (uint64, bool) {
	sc, n, ok := parseHoldKey(h.Key)
	if !ok {
		return 0, false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	ref, held := v.holds[sc][n]
	return ref.rev, held && ref.token == h.Token && h.Token != ""
}

// freeHolds returns up to limit holder slots below max that the view believes free.
func (v *view) freeHolds(sc holdScope, max, limit int) []int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	m := v.holds[sc]
	return freeAmong(max, func(n int) bool { _, held := m[n]; return held }, slices.Collect(maps.Keys(m)), limit)
}

// hold is a holder slot an acquire took, to be used by its grant or given back.
type hold struct {
	scope holdScope
	key   string
	rev   uint64
	token string
	at    time.Time // when it was created: its TTL runs from then
	ttl   time.Duration
}

// errHolderFull: the holder holds its limit in the candidate's pool.
var errHolderFull = errors.New("holder at its limit")

// takeHold takes a holder slot for a lease on c, or reuses the one this acquire already
// holds in c's pool: (nil, nil) when c's pool caps no holder, errHolderFull when the holder is
// at its limit there (at records it).
func (l *Leaser) takeHold(ctx context.Context, r events.AcquireRequest, c selection.Candidate, at *attempt, ttl time.Duration) (*hold, error) {
	if c.HolderCap == 0 {
		return nil, nil
	}
	if r.Holder == "" {
		return nil, badRequest("holder", "holder is required: leases %s are capped at %d per holder (maxPerHolder)",
			holdScope{pool: c.Pool}.where(), c.HolderCap)
	}
	sc := holdScope{pool: c.Pool, holder: r.Holder}
	if at.hold != nil && at.hold.scope == sc {
		return at.hold, nil
	}
	l.dropUnusedHold(at) // taken in another pool
	if _, full := at.holderFull[c.Pool]; full {
		at.capped[c.Name] = true
		return nil, errHolderFull
	}
	free := l.view.freeHolds(sc, c.HolderCap, selection.SlotsPerCandidate)
	if len(free) == 0 {
		// The view may lag behind a release on another replica: read before refusing.
		held, err := l.listHolds(ctx, sc)
		if err != nil {
			return nil, err
		}
		free = freeAmong(c.HolderCap, func(n int) bool { return held[n] }, slices.Collect(maps.Keys(held)), selection.SlotsPerCandidate)
	}
	token := newToken()
	b, err := json.Marshal(events.HolderSlot{V: 1, Holder: r.Holder, Pool: c.Pool, Token: token})
	if err != nil {
		return nil, err
	}
	for _, n := range free {
		key := sc.key(n)
		now := time.Now()
		rev, err := kvstore.CreateTTL(ctx, l.cfg.Buckets.LeaseState, key, b, ttl+holdMargin)
		if errors.Is(err, kvstore.ErrConflict) {
			continue // taken since the view or the listing saw it
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", key, err)
		}
		l.view.noteState(key, rev, true, b)
		at.hold = &hold{scope: sc, key: key, rev: rev, token: token, at: now, ttl: ttl}
		return at.hold, nil
	}
	at.holderFull[c.Pool] = c.HolderCap
	at.capped[c.Name] = true
	return nil, errHolderFull
}

// listHolds reads the holder slots of sc that are held now.
func (l *Leaser) listHolds(ctx context.Context, sc holdScope) (map[int]bool, error) {
	lister, err := l.cfg.Buckets.LeaseState.ListKeysFiltered(ctx, sc.prefix()+".*")
	if err != nil {
		return nil, fmt.Errorf("list holder slots: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	held := map[int]bool{}
	for k := range lister.Keys() {
		if _, n, ok := parseHoldKey(k); ok {
			held[n] = true
		}
	}
	return held, ctx.Err()
}

// granted hands the acquire's holder slot to its lease. A slot Create that took long eats
// into holdMargin: the holder slot is then rewritten with a fresh TTL, so that it still
// outlives the lease.
func (l *Leaser) granted(ctx context.Context, at *attempt, h *hold) {
	at.hold = nil
	if h == nil || time.Since(h.at) < holdMargin/2 {
		return
	}
	if err := l.putHold(ctx, h.scope, h.key, h.token, h.rev, h.ttl); err != nil {
		l.log.Warn("refresh a holder slot", "slot", h.key, "err", err)
	}
}

// putHold rewrites a holder slot with the TTL of a lease of ttl, at rev (0: create it).
func (l *Leaser) putHold(ctx context.Context, sc holdScope, key, token string, rev uint64, ttl time.Duration) error {
	b, err := json.Marshal(events.HolderSlot{V: 1, Holder: sc.holder, Pool: sc.pool, Token: token})
	if err != nil {
		return err
	}
	nrev, err := kvstore.WriteTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, key, b, rev, ttl+holdMargin)
	if err != nil {
		return err
	}
	l.view.noteState(key, nrev, true, b)
	return nil
}

// dropUnusedHold gives back the holder slot an acquire took but did not grant with. If that
// fails the slot only counts until its TTL.
func (l *Leaser) dropUnusedHold(at *attempt) {
	h := at.hold
	if h == nil {
		return
	}
	at.hold = nil
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestBudget)
	defer cancel()
	if err := kvstore.DeleteAt(ctx, l.cfg.Buckets.LeaseState, h.key, h.rev); err != nil {
		l.log.Warn("give back an unused holder slot; it frees itself at its TTL", "slot", h.key, "err", err)
		return
	}
	l.view.noteStateGone(h.key, h.rev)
}

// readHold reads a lease's holder slot: its revision, or 0 when it is gone or holds another
// lease's hold.
func (l *Leaser) readHold(ctx context.Context, h *events.LeaseHold) (uint64, error) {
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, h.Key)
	if errors.Is(err, kvstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", h.Key, err)
	}
	var rec events.HolderSlot
	if json.Unmarshal(raw, &rec) != nil || rec.Token != h.Token {
		return 0, nil
	}
	return rev, nil
}

// holdAt runs write at the revision of h: the view's when it holds h (no read: the usual
// case, the replica wrote it or its watch brought it), read from KV when it does not or when
// the write finds the slot moved on since.
func (l *Leaser) holdAt(ctx context.Context, h *events.LeaseHold, write func(rev uint64) error) error {
	if rev, ok := l.view.heldRev(h); ok {
		if err := write(rev); !errors.Is(err, kvstore.ErrConflict) {
			return err
		}
	}
	rev, err := l.readHold(ctx, h)
	if err != nil {
		return err
	}
	return write(rev)
}

// renewHold gives a lease's holder slot the TTL of the renewal, before the proxy slot gets it.
// A holder slot that is gone (purged by hand) is taken again if it is free; one that holds
// another lease's hold is left alone, and the lease renews uncounted until it ends.
func (l *Leaser) renewHold(ctx context.Context, rec events.Lease, ttl time.Duration) error {
	h := rec.Hold
	if h == nil {
		return nil
	}
	sc, _, ok := parseHoldKey(h.Key)
	if !ok {
		return nil
	}
	err := l.holdAt(ctx, h, func(rev uint64) error { return l.putHold(ctx, sc, h.Key, h.Token, rev, ttl) })
	if errors.Is(err, kvstore.ErrConflict) {
		l.log.Warn("a renewed lease's holder slot holds another lease", "slot", h.Key)
		return nil
	}
	return err
}

// dropHold deletes an ended lease's holder slot after its proxy slot; if that fails the holder
// slot only counts until its TTL.
func (l *Leaser) dropHold(ctx context.Context, h *events.LeaseHold) {
	if h == nil {
		return
	}
	err := l.holdAt(ctx, h, func(rev uint64) error {
		if rev == 0 {
			return nil // gone, or another lease's
		}
		err := kvstore.DeleteAt(ctx, l.cfg.Buckets.LeaseState, h.Key, rev)
		if err == nil {
			l.view.noteStateGone(h.Key, rev)
		}
		return err
	})
	if err != nil {
		l.log.Warn("delete the holder slot of an ended lease; it frees itself at its TTL", "slot", h.Key, "err", err)
	}
}

// holderAtCapError is the refusal of an acquire that found only pools where the holder is at
// its limit (and nothing else free): 429, naming the limit.
func holderAtCapError(holder string, at *attempt, av *events.Availability) *apiError {
	pools := slices.Sorted(maps.Keys(at.holderFull))
	sc := holdScope{pool: pools[0], holder: holder}
	limit := at.holderFull[sc.pool]
	return &apiError{code: events.CodeTooMany, reason: events.ErrorHolderAtCap, limit: limit, avail: av,
		msg: fmt.Sprintf("holder %q holds %d leases %s, its limit (maxPerHolder); release one or wait for one to expire",
			truncate(holder, 80), limit, sc.where())}
}

// freeAmong returns up to limit numbers below max that held does not report, in random order
// (so that replicas racing for them spread); taken lists the held ones, some maybe above max.
// Its cost does not grow with max (up to 10,000) while a quarter of them are free.
func freeAmong(max int, held func(int) bool, taken []int, limit int) []int {
	count := 0
	for _, n := range taken {
		if n < max {
			count++
		}
	}
	return selection.FreeNumbers(max, count, held, limit)
}
