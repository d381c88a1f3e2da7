package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// attempt is what one acquire learned from the server beyond the view (selection.Learned:
// proxies whose every believed-free slot turned out taken, cooldowns the view had not seen
// yet). It also carries the holder slot it took (holders.go) until a grant uses it, the pools
// where the holder turned out to be at its limit (with that limit; the query passes their
// proxies over), and the candidates passed over for it.
type attempt struct {
	selection.Learned
	holderFull map[string]int // pool → the holder's limit there
	capped     map[string]bool
	hold       *hold
	tier       *events.LeaseTier // the tier a tiered acquire tries (tiers.go); nil without
}

func newAttempt() *attempt {
	return &attempt{Learned: selection.NewLearned(), holderFull: map[string]int{}, capped: map[string]bool{}}
}

// candidateBatch is how many candidates an acquire reads from the view at a time: the first
// usually succeeds, and a batch that is used up is followed by the next one.
const candidateBatch = 4

// acquireDecoded picks candidates from the view and commits the first slot whose Create succeeds.
// The view may be stale in both directions; a Create that finds its slot taken just moves on,
// so any number of replicas never grant more than maxLeases slots of a proxy. A sticky
// session (sessionSeconds) goes to the proxy it is bound to first, and only there when it is
// strict (sessions.go); a capped holder takes a holder slot before each grant (holders.go).
func (l *Leaser) acquireDecoded(ctx context.Context, r events.AcquireRequest, ttl time.Duration) (any, error) {
	if len(r.Tiers) > 0 {
		return l.acquireTiered(ctx, r, ttl)
	}
	return l.acquireOn(ctx, r, ttl, nil)
}

// acquireOn is acquireDecoded on one tier (nil: without tiers), recorded in the lease.
func (l *Leaser) acquireOn(ctx context.Context, r events.AcquireRequest, ttl time.Duration, tier *events.LeaseTier) (any, error) {
	if r.Strategy == "" {
		r.Strategy = l.view.defaultStrategy(r.Selector)
	}
	q := selection.NewQuery(r)
	q.Now = l.now()
	at := newAttempt()
	at.tier = tier
	q.Capped = at.holderFull
	defer l.dropUnusedHold(at)
	if r.SessionSeconds == 0 {
		return l.acquireAny(ctx, r, ttl, q, at)
	}
	s, err := l.openSession(ctx, r)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		if s.bound && s.strict {
			return l.acquireStrict(ctx, r, ttl, q, s, at)
		}
		q.Prefer = s.ref.proxy
		g, err := l.acquireAny(ctx, r, ttl, q, at)
		if err != nil {
			return nil, err
		}
		lr := g.(events.LeaseReply)
		ref := l.bindSession(ctx, s, lr.Lease.Proxy)
		if ref.proxy == lr.Lease.Proxy || try > 0 {
			return g, nil
		}
		// A concurrent acquire bound the new session to another proxy first: this grant goes
		// back, and the session's proxy it is (or, soft, another if that one is unavailable).
		if id, err := parseLeaseID(lr.Lease.ID); err == nil {
			if _, _, err := l.deleteLease(ctx, id); err != nil {
				l.log.Warn("give back a lease of a session bound elsewhere meanwhile; it ends at its TTL", "id", lr.Lease.ID, "err", err)
			}
		}
		s.bound, s.ref = true, ref
	}
}

// acquireAny leases the first candidate of q that has a free slot.
func (l *Leaser) acquireAny(ctx context.Context, r events.AcquireRequest, ttl time.Duration, q selection.Query, at *attempt) (any, error) {
	// With neighbourhoods, the proxies near one the holder already holds for the target go
	// after all the others (a second pass): the holder's leases spread over neighbourhoods.
	q.Avoid = l.crowded(r)
	tried := map[string]bool{}
	lost := false // a Create race was lost: spread over equals from now on
	// Candidates in a stalled shard are passed over, and a shard that stalls now moves the
	// acquire on (shards.go): a node's crash then holds up no acquire. What was passed over
	// is counted, so that an acquire that found nothing else says so (ShardUnavailable).
	skipped := map[int]int{}        // shard → candidates passed over
	var later []selection.Candidate // being created by another request here: tried last
	try := func(c selection.Candidate) (any, bool, error) {
		if l.shards.stalled(c.Name) {
			skipped[l.cfg.Buckets.Leases.Index(c.Name)]++
			return nil, false, nil
		}
		g, conflicts, err := l.tryCandidateTraced(ctx, r, ttl, c, at)
		if errors.Is(err, errShardStalled) {
			skipped[l.cfg.Buckets.Leases.Index(c.Name)]++
			return nil, false, nil
		}
		lost = lost || conflicts > 0
		return g, err != nil || g != nil, err
	}
	for cur := (selection.Cursor{}); ; {
		batch := l.view.fleet.Next(q, &cur, tried, candidateBatch)
		if len(batch) == 0 && len(q.Avoid) > 0 {
			q.Avoid, cur = nil, selection.Cursor{}
			continue
		}
		if len(batch) == 0 {
			break
		}
		for i := 0; i < len(batch); i++ {
			if lost {
				selection.SpreadTies(batch[i:])
			}
			c := batch[i]
			tried[c.Name] = true
			if !c.Sticky && spreads(r.Strategy) && l.creating.busy(c.Name) {
				later = append(later, c)
				continue
			}
			if g, done, err := try(c); done {
				return g, err
			}
		}
	}
	for _, c := range later {
		if g, done, err := try(c); done {
			return g, err
		}
	}
	av := l.view.fleet.Availability(q, at.Learned)
	if len(skipped) > 0 { // not demand: a retry may find the shard back
		return nil, l.shardUnavailable("no proxy available outside stalled lease shards", skipped, &av)
	}
	if len(at.holderFull) > 0 {
		return nil, holderAtCapError(r.Holder, at, &av)
	}
	if !forWaiter(ctx) { // a waiter's refusals are not demand: it is counted waiting (wait.go)
		l.demand.refused(r.Selector, r.Holder)
	}
	msg := fmt.Sprintf("no proxy available: %d match the selector, %d of them Ready, %d at capacity, %d cooling down for this target, %d cooling down for every target",
		av.Matched, av.Ready, av.AtCapacity, av.CoolingTarget, av.CoolingGlobal)
	if r.MinAnonymity != "" {
		msg += fmt.Sprintf(", %d less anonymous than %s (or not judged)", av.BelowAnonymity, r.MinAnonymity)
	}
	if !av.NextAllowedAt.IsZero() {
		msg += fmt.Sprintf("; the first cooling for this target may be granted again at %s", av.NextAllowedAt.UTC().Format(time.RFC3339))
	}
	return nil, &apiError{code: events.CodeUnavailable, avail: &av, msg: msg}
}

// tryCandidate tries c's free slots in turn while it reads c's cooldowns, returning the grant
// or how many of its slots turned out taken.
func (l *Leaser) tryCandidate(ctx context.Context, r events.AcquireRequest, ttl time.Duration, c selection.Candidate, at *attempt) (any, int, error) {
	// The view learns of a cooldown through a watch, a moment after the report that set it;
	// reading the keys here means a report answered before this acquire is honoured whichever
	// replica served it. The read runs alongside the Create, since a proxy the view holds
	// eligible is almost never cooling down: the rare slot taken in vain is given back.
	h, err := l.takeHold(ctx, r, c, at, ttl)
	if errors.Is(err, errHolderFull) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	cooling := l.startCoolingCheck(ctx, c.Name, r.Target, l.pace(r))
	conflicts := 0
	var (
		lease events.Lease
		key   string
		rev   uint64
	)
	for _, slot := range c.Free {
		lease = l.newLease(r, c, slot, ttl, h)
		lease.Tier = at.tier
		var b []byte
		if b, err = json.Marshal(lease); err != nil {
			break
		}
		key = events.SlotKey(c.Name, slot)
		if !l.creating.take(c.Name, key) {
			continue // another request here is creating it, as if taken
		}
		defer l.creating.drop(c.Name, key) // once the view counts the grant, or at once
		wctx, cancel := l.shards.writeContext(ctx)
		rev, err = l.createSlot(wctx, l.cfg.Buckets.Leases.Of(c.Name), key, slot, b, ttl)
		cancel()
		if errors.Is(err, kvstore.ErrConflict) {
			conflicts++
			rev, err = 0, nil
			continue // taken by another replica since the view last heard
		}
		if err != nil {
			// The write may still be committed later: if it is, the slot is given back when
			// the watch delivers it.
			l.view.abandon(lease.Token)
			err = l.shards.failed(ctx, c.Name, fmt.Errorf("create %s: %w", key, err))
		}
		break
	}
	which, paced, cerr := cooling()
	granted := err == nil && rev != 0
	if granted && (cerr != nil || which != "") {
		l.giveBack(ctx, key, rev)
	}
	if !granted || cerr != nil || which != "" {
		l.unpace(ctx, c.Name, r.Target, paced)
	}
	switch {
	case cerr != nil:
		return nil, 0, cerr
	case which == "global":
		at.CoolingGlobal[c.Name] = true
		return nil, 0, nil
	case which == "target":
		at.CoolingTarget[c.Name] = true
		return nil, 0, nil
	case err != nil:
		return nil, 0, err
	case rev == 0:
		at.Full[c.Name] = true
		return nil, conflicts, nil
	}
	// Counted in the view at once, before the watch echoes it: the next acquire ranks by it.
	l.wroteSlot(key, rev, lease)
	l.view.fleet.Outcome(c.Name, r.Target, 1, 0, 0, lease.AcquiredAt) // best-for-target learns from every grant
	l.granted(ctx, at, h)
	l.demand.grantedAnswering(c.Pool, r.Selector, r.Holder, !forWaiter(ctx))
	id := leaseID{Proxy: c.Name, Slot: lease.Slot, Token: lease.Token}.String()
	l.emitLease(events.ReasonGranted, "granted:"+id, lease, rev)
	l.log.Debug("lease granted", "id", id, "holder", r.Holder, "target", r.Target)
	return events.LeaseReply{Lease: l.grant(id, lease, c.Endpoint)}, conflicts, nil
}

// newLease is the record of a grant of slot of c to r, against what the view knew of c.
func (l *Leaser) newLease(r events.AcquireRequest, c selection.Candidate, slot int, ttl time.Duration, h *hold) events.Lease {
	now := l.now()
	lease := events.Lease{V: 1, Proxy: c.Name, Slot: slot, Token: newToken(), TTLSeconds: int(ttl / time.Second),
		Holder: r.Holder, Target: r.Target, Sticky: r.Sticky, AcquiredAt: now, ExpiresAt: now.Add(ttl),
		SpecRevision: c.Basis.SpecRev, StatusRevision: c.Basis.StatusRev, Instance: c.Basis.Instance, RequestID: r.RequestID}
	if h != nil {
		lease.Hold = &events.LeaseHold{Key: h.key, Token: h.token}
	}
	return lease
}

// giveBack deletes a slot just created for a proxy that turned out to be cooling down. If
// that fails the slot is only lost until its TTL runs out: it never carried a grant.
func (l *Leaser) giveBack(ctx context.Context, key string, rev uint64) {
	if err := kvstore.DeleteAt(ctx, l.cfg.Buckets.Leases.ForKey(key), key, rev); err != nil {
		l.log.Warn("give back a slot of a proxy cooling down; it frees itself at its TTL", "slot", key, "err", err)
	}
}

// startCoolingCheck reads the proxy's global and target cooldown keys in a goroutine and
// returns the wait for its answer: "global", "target" or "" (none), and with pacing the
// revision of the pacing mark it made (pace.go). The caller must wait; the goroutine ends
// with ctx at the latest.
func (l *Leaser) startCoolingCheck(ctx context.Context, proxy, tgt string, pace time.Duration) func() (string, uint64, error) {
	type result struct {
		which string
		paced uint64
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		which, paced, err := l.coolingNow(ctx, proxy, tgt, pace)
		ch <- result{which, paced, err}
	}()
	return func() (string, uint64, error) {
		r := <-ch
		return r.which, r.paced, r.err
	}
}

// coolingNow reads the proxy's global and target cooldown keys and records what it finds in
// the view. With pacing, the target's key is created (markPaced) rather than read.
func (l *Leaser) coolingNow(ctx context.Context, proxy, tgt string, pace time.Duration) (string, uint64, error) {
	keys := []string{globalCooldownKey(proxy)}
	if tgt != "" && pace == 0 {
		keys = append(keys, targetCooldownKey(proxy, tgt))
	}
	for i, key := range keys {
		b, rev, err := l.get(ctx, l.cfg.Buckets.Cooldowns, key)
		if errors.Is(err, kvstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("read cooldown %s: %w", key, err)
		}
		l.view.noteCooldown(key, rev, true, cooldownEnd(b))
		if i == 0 {
			return "global", 0, nil
		}
		return "target", 0, nil
	}
	if tgt == "" || pace == 0 {
		return "", 0, nil
	}
	cooling, paced, err := l.markPaced(ctx, proxy, tgt, pace)
	if cooling {
		return "target", 0, err
	}
	return "", paced, err
}
