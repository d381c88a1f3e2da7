package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// candidateBatch is how many candidates an acquire reads from the view at a time: the first
// usually succeeds, and a batch that is used up is followed by the next one.
const candidateBatch = 4

// acquire picks candidates from the view and commits the first slot whose Create succeeds.
// The view may be stale in both directions; a Create that finds its slot taken just moves on,
// so any number of replicas never grant more than maxLeases slots of a proxy.
func (l *Leaser) acquire(ctx context.Context, data []byte) (any, error) {
	r, ttl, err := l.decodeAcquire(data)
	if err != nil {
		return nil, err
	}
	q := newQuery(r.Selector, r.Target, r.Sticky)
	at := newAttempt()
	var cur cursor
	tried := map[string]bool{}
	lost := false // a Create race was lost: spread over equals from now on
	for {
		batch := l.view.next(q, &cur, tried, candidateBatch)
		if len(batch) == 0 {
			break
		}
		for i := 0; i < len(batch); i++ {
			if lost {
				spreadTies(batch[i:])
			}
			c := batch[i]
			tried[c.name] = true
			g, conflicts, err := l.tryCandidate(ctx, r, ttl, c, at)
			if err != nil || g != nil {
				return g, err
			}
			lost = lost || conflicts > 0
		}
	}
	av := l.view.availability(q, at)
	return nil, &apiError{code: events.CodeUnavailable, avail: &av, msg: fmt.Sprintf(
		"no proxy available: %d match the selector, %d of them Ready, %d at capacity, %d cooling down for this target, %d cooling down for every target",
		av.Matched, av.Ready, av.AtCapacity, av.CoolingTarget, av.CoolingGlobal)}
}

// tryCandidate checks c's cooldowns and tries its free slots in turn, returning the grant or
// how many of its slots turned out taken.
func (l *Leaser) tryCandidate(ctx context.Context, r events.AcquireRequest, ttl time.Duration, c candidate, at *attempt) (any, int, error) {
	// The view learns of a cooldown through a watch, a moment after the report that set
	// it; reading the keys here means a report answered before this acquire is honoured
	// whichever replica served it.
	cooling, err := l.coolingNow(ctx, c.name, r.Target, at)
	if err != nil || cooling {
		return nil, 0, err
	}
	conflicts := 0
	for _, slot := range c.free {
		now := l.now()
		lease := events.Lease{V: 1, Proxy: c.name, Slot: slot, Token: newToken(), TTLSeconds: int(ttl / time.Second),
			Holder: r.Holder, Target: r.Target, Sticky: r.Sticky, AcquiredAt: now, ExpiresAt: now.Add(ttl)}
		b, err := json.Marshal(lease)
		if err != nil {
			return nil, 0, err
		}
		key := slotKey(c.name, slot)
		rev, err := kvstore.CreateTTL(ctx, l.cfg.Store.Leases, key, b, ttl)
		if errors.Is(err, kvstore.ErrConflict) {
			conflicts++
			continue // taken by another replica since the view last heard
		}
		if err != nil {
			return nil, 0, fmt.Errorf("create %s: %w", key, err)
		}
		// Counted in the view at once, before the watch echoes it, so this replica's next
		// acquire already ranks the proxy by its new load.
		l.view.noteLease(key, rev, lease)
		id := leaseID{Proxy: c.name, Slot: slot, Token: lease.Token}.String()
		l.emitLease("granted", "granted:"+id, lease)
		l.log.Debug("lease granted", "id", id, "holder", r.Holder, "target", r.Target)
		return events.LeaseReply{Lease: grant(id, lease, c.endpoint)}, conflicts, nil
	}
	at.full[c.name] = true
	return nil, conflicts, nil
}

// coolingNow reads the proxy's global and target cooldown keys and records what it finds in
// the attempt (and the view).
func (l *Leaser) coolingNow(ctx context.Context, proxy, tgt string, at *attempt) (bool, error) {
	keys := []string{globalCooldownKey(proxy)}
	if tgt != "" {
		keys = append(keys, targetCooldownKey(proxy, tgt))
	}
	for i, key := range keys {
		_, rev, err := kvstore.Get(ctx, l.cfg.Store.Cooldowns, key)
		if errors.Is(err, kvstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read cooldown %s: %w", key, err)
		}
		l.view.noteCooldown(key, rev, true)
		if i == 0 {
			at.coolingGlobal[proxy] = true
		} else {
			at.coolingTarget[proxy] = true
		}
		return true, nil
	}
	return false, nil
}
