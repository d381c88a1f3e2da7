package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// The slots of a proxy that was deleted, or whose instance was replaced, go with it
// (DESIGN §5.1) instead of holding their proxy's capacity until their TTLs. Every leaser
// finds them in its own view and deletes them at the revision it saw, so whichever replica
// is first removes each slot once and a lease granted since (a newer revision) is never
// touched. A lease records what it was granted against (events.Lease.SpecRevision,
// StatusRevision, Instance); a slot is stale only when the view has seen past that:
//
//   - deleted: the proxy's spec key is deleted (or absent) and the view has read the
//     proxies bucket up to the spec revision the lease was granted under;
//   - replaced: the view holds a newer status than the grant's, and it names another
//     instance, or says the instance must go. An instance the status lists as retiring is
//     not gone: a proxy rolled successor first keeps it serving the leases granted on it
//     until they end (decision 98), unless the proxy itself is being deleted.
//
// A view that lags behind the grant sees neither, so it never removes a fresh lease.

// removal is a slot to delete at rev: an ended lease (end set: the delete marker says why,
// and an event is published) or a grant given up on (end empty).
type removal struct {
	key   string
	rev   uint64
	lease events.Lease
	end   events.Reason
}

// endedLease is why a lease was ended, kept for its holder's next renewal.
type endedLease struct {
	end events.Reason
	at  time.Time
}

// Bounds of the memories below: a holder renews within its TTL (at most an hour), and past
// maxRemembered tokens the oldest half is forgotten (the renewal then gets a plain 404).
const (
	rememberFor   = time.Hour
	maxRemembered = 100_000
)

// staleEnd is why a slot holding l must go, "" when it may stay, from h, what the view heard
// of its proxy. Callers hold mu.
func (v *view) staleEnd(h selection.Heard, l events.Lease) events.Reason {
	switch {
	case (h.SpecRev == 0 || h.SpecGone) && v.specHigh >= l.SpecRevision:
		return events.ReasonProxyDeleted
	case l.StatusRevision == 0 || !h.HasStatus || h.StatusRev <= l.StatusRevision:
		return "" // a lease from before the records, or a view that lags behind the grant
	case slices.Contains(h.Retiring, l.Instance) && h.Teardown != events.ReasonProxyDeleted:
		return ""
	case h.Instance != l.Instance || h.Teardown != "":
		// The status may say "deleting" before the spec's deletion reaches this view (a pool
		// deleting its member): the lease ended because its proxy was deleted all the same.
		if h.Teardown == events.ReasonProxyDeleted {
			return events.ReasonProxyDeleted
		}
		return events.ReasonProxyReplaced
	}
	return ""
}

// findStale queues the stale slots of proxy for the sweeper. Callers hold mu.
func (v *view) findStale(proxy string) {
	if !v.sweeping {
		return
	}
	v.fleet.HeldSlots(proxy, func(h selection.Heard, s selection.Slot) {
		if end := v.staleEnd(h, s.Lease); end != "" && s.Rev != 0 {
			v.queue(removal{key: events.SlotKey(proxy, s.Lease.Slot), rev: s.Rev, lease: s.Lease, end: end})
		}
	})
}

// queue hands r to the sweeper; a newer removal of the same key replaces an older one.
// Callers hold mu.
func (v *view) queue(r removal) {
	if old, ok := v.removals[r.key]; ok && old.rev > r.rev {
		return
	}
	v.removals[r.key] = r
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// startSweeping looks for stale slots from now on, and over every proxy once: before every
// watch has delivered its initial values a spec or status may only look absent or old.
func (v *view) startSweeping() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sweeping = true
	for _, name := range v.fleet.Names() {
		v.findStale(name)
	}
}

func (v *view) takeRemovals() map[string]removal {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.removals
	v.removals = map[string]removal{}
	return out
}

// abandon remembers a grant whose slot write failed or ran out of time: if the write is
// committed after all, the watch brings the slot and it is given back.
func (v *view) abandon(token string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.abandoned[token] = time.Now()
	trimOldest(v.abandoned, func(t time.Time) time.Time { return t })
}

// noteSlot is called for every slot the watch brings: an abandoned grant is given back, a
// stale lease removed. Callers hold mu.
func (v *view) noteSlot(proxy, key string, rev uint64, l events.Lease) {
	if _, ok := v.abandoned[l.Token]; ok && l.Token != "" {
		delete(v.abandoned, l.Token)
		if !l.Adopted { // a retry of its acquire answered with it meanwhile: it is held
			v.queue(removal{key: key, rev: rev, lease: l})
		}
		return
	}
	if !v.sweeping {
		return
	}
	h, _ := v.fleet.Heard(proxy)
	if end := v.staleEnd(h, l); end != "" {
		v.queue(removal{key: key, rev: rev, lease: l, end: end})
	}
}

// noteEnded remembers why the lease of token ended.
func (v *view) noteEnded(token string, end events.Reason) {
	if token == "" || end == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ended[token] = endedLease{end: end, at: time.Now()}
	trimOldest(v.ended, func(e endedLease) time.Time { return e.at })
}

// endOf is why the lease of token was ended by a leaser, "" if no leaser did (as far as
// this one knows).
func (v *view) endOf(token string) events.Reason {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.ended[token]
	if !ok || time.Since(e.at) > rememberFor {
		return ""
	}
	return e.end
}

// trimOldest bounds m once it holds more than maxRemembered entries: those older than
// rememberFor go, and if that is not enough, any tenth.
func trimOldest[T any](m map[string]T, at func(T) time.Time) {
	if len(m) <= maxRemembered {
		return
	}
	cut := time.Now().Add(-rememberFor)
	for k, e := range m {
		if at(e).Before(cut) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) <= maxRemembered*9/10 {
			break
		}
		delete(m, k)
	}
}

// sweep deletes the slots the view queues until ctx ends.
func (l *Leaser) sweep(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.view.wake:
		}
		for _, r := range l.view.takeRemovals() {
			if ctx.Err() != nil {
				return
			}
			l.remove(ctx, r)
		}
	}
}

// remove deletes r's slot at its revision. A conflict means the slot changed since (another
// replica removed it, or its holder renewed it: the view then looks at it again).
func (l *Leaser) remove(ctx context.Context, r removal) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
	defer cancel()
	kv := l.cfg.Buckets.Leases.ForKey(r.key)
	var err error
	if r.end == "" {
		err = kvstore.DeleteAt(ctx, kv, r.key, r.rev)
	} else {
		note, _ := json.Marshal(events.SlotEnd{V: 1, Token: r.lease.Token, End: r.end})
		err = kvstore.DeleteNoted(ctx, l.cfg.Buckets.JS, kv, r.key, r.rev, note)
	}
	switch {
	case errors.Is(err, kvstore.ErrConflict) || errors.Is(err, kvstore.ErrNotFound):
		return
	case err != nil:
		l.log.Warn("remove a leftover lease slot; it frees itself at its TTL", "slot", r.key, "err", err)
		return
	}
	l.view.noteReleased(r.key, r.rev)
	if r.end == "" {
		// A grant given up on: its acquire kept the holder slot for its next candidate, and
		// gave it back or granted with it.
		return
	}
	l.dropHold(ctx, r.lease.Hold)
	l.revoke(ctx, r.lease, r.end)
	l.view.noteEnded(r.lease.Token, r.end)
	rec := r.lease
	rec.ExpiresAt = l.now()
	l.emitLease(r.end, fmt.Sprintf("ended:%s:%d", r.key, r.rev), rec, 0)
	l.log.Info("lease ended with its proxy", "id", leaseID{Proxy: rec.Proxy, Slot: rec.Slot, Token: rec.Token}.String(), "end", r.end)
}

// goneError is the answer to a renewal of a lease that a leaser ended, nil if none did.
func (l *Leaser) goneError(id leaseID) error {
	return endedError(id, l.view.endOf(id.Token))
}

// endedError is the answer to a renewal of a lease ended for end, nil for "".
func endedError(id leaseID, end events.Reason) error {
	if end == "" {
		return nil
	}
	why := "its proxy was deleted"
	if end == events.ReasonProxyReplaced {
		why = "its proxy's instance was replaced"
	}
	return &apiError{code: events.CodeGone, field: "id", end: end, msg: fmt.Sprintf("lease %s was ended: %s", id, why)}
}

// staleLease is why the slot key at rev holding l must go, "" if it may stay; a stale slot
// is queued for the sweeper.
func (v *view) staleLease(key string, rev uint64, l events.Lease) events.Reason {
	v.mu.Lock()
	defer v.mu.Unlock()
	h, known := v.fleet.Heard(l.Proxy)
	if !known || !v.sweeping {
		return ""
	}
	end := v.staleEnd(h, l)
	if end != "" {
		v.queue(removal{key: key, rev: rev, lease: l, end: end})
	}
	return end
}
