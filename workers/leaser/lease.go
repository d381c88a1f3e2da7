package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// readLease reads the slot of id and checks that it still holds this grant: 404 when the slot
// is empty (never granted, released or expired), 409 when it holds another grant.
func (l *Leaser) readLease(ctx context.Context, id leaseID) (events.Lease, uint64, error) {
	return l.readLeaseAfter(ctx, id, false)
}

// readLeaseAfter is readLease; conflicted says that a write at the revision it gave before
// failed, so the view's record no longer stands in for a slot the read does not find: the
// slot changed since the view heard of it (released or expired on another replica, whose
// delete this view has not heard yet), and the same stand-in would only fail again.
func (l *Leaser) readLeaseAfter(ctx context.Context, id leaseID, conflicted bool) (events.Lease, uint64, error) {
	key := events.SlotKey(id.Proxy, id.Slot)
	raw, rev, err := l.get(ctx, l.cfg.Buckets.Leases.Of(id.Proxy), key)
	if errors.Is(err, kvstore.ErrNotFound) {
		// A direct get is served by any replica of the shard, which may be a moment behind a
		// grant (or a restarted server catching up). If this replica's view holds the grant,
		// it was made: its record and revision stand in, and a write that follows, at that
		// revision, is exact whatever the read said. But the view may be behind too, the
		// lease released on another replica: a caller that writes nothing (an acquire's
		// retry answered with its earlier lease) would hand out a lease nobody holds. The
		// slot's last entry, folded in as the watch would fold it, tells which: a removal
		// after the grant frees the slot in the view; a read as far behind changes nothing.
		folded := false
		if _, _, held := l.view.heldLease(key, id.Token); held && !conflicted {
			folded = l.foldLast(ctx, id, key)
			if rec, rev, held := l.view.heldLease(key, id.Token); held {
				return rec, rev, checkCaller(ctx, id, rec)
			}
		}
		if gone := l.goneError(id); gone != nil {
			return events.Lease{}, 0, gone
		}
		if !folded {
			if gone := l.goneElsewhere(ctx, id, key); gone != nil {
				return events.Lease{}, 0, gone
			}
		}
		return events.Lease{}, 0, &apiError{code: events.CodeNotFound, field: "id",
			msg: fmt.Sprintf("lease %s is unknown or has expired", id)}
	}
	if err != nil {
		return events.Lease{}, 0, fmt.Errorf("read %s: %w", key, err)
	}
	var rec events.Lease
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Token != id.Token {
		return events.Lease{}, 0, &apiError{code: events.CodeConflict, field: "id",
			msg: fmt.Sprintf("lease %s is not held: its slot holds another lease now (this one expired or was released, or never existed)", id)}
	}
	if err := checkCaller(ctx, id, rec); err != nil {
		return events.Lease{}, 0, err
	}
	return rec, rev, nil
}

// callerKey carries, in a request's context, the crawler an HTTP request authenticated as.
type callerKey struct{}

// withCaller marks ctx as a request of crawler (the HTTP face's bearer token).
func withCaller(ctx context.Context, crawler string) context.Context {
	return context.WithValue(ctx, callerKey{}, crawler)
}

// checkCaller refuses a renewal, release or report of a lease whose holder is not the crawler
// the request authenticated as. Lease IDs are no secret (events, logs, and with auth.mode
// lease the username every request shows the proxy), and a renewal answers with the proxy's
// credentials, so over HTTP, where each crawler has a token of its own, only the holder may
// act on a lease. Over NATS crawlers share one user, and nothing changes.
func checkCaller(ctx context.Context, id leaseID, rec events.Lease) error {
	crawler, ok := ctx.Value(callerKey{}).(string)
	if !ok || rec.Holder == crawler {
		return nil
	}
	return &apiError{code: events.CodeNotFound, field: "id",
		msg: fmt.Sprintf("lease %s is not held by crawler %s (the crawler of this bearer token)", id, truncate(crawler, 40))}
}

// casRetries bounds how often a renewal or release re-reads a slot that changed under it
// (the same holder renewing from two places at once).
const casRetries = 3

// emitLease counts a lease event in the statistics and, if the raw mode publishes its kind,
// emits it. wrote is the slot revision a grant or renewal just wrote (0 for an end). Grants,
// renewals and releases are written by the replica that made them, once (unique); an end
// another replica may see too is deduplicated by ID.
func (l *Leaser) emitLease(reason events.Reason, msgID string, lease events.Lease, wrote uint64) {
	key := events.SlotKey(lease.Proxy, lease.Slot)
	l.stats.lease(l.view.originOf(lease.Proxy).inTier(lease.Tier), lease.Proxy, lease.Target, key, reason, wrote)
	if !l.cfg.RawEvents.Publishes(reason) {
		return
	}
	emit := l.emitter.emit
	switch reason {
	case events.ReasonGranted, events.ReasonRenewed, events.ReasonReleased:
		emit = l.emitter.emitUnique
	}
	emit(events.Event{ID: msgID, Kind: events.KindLease, Proxy: lease.Proxy, At: l.now(), Reason: reason,
		Lease: leaseEvent(lease, reason)})
}

// leaseEvent is what an event tells of lease; an end tells when it began too.
func leaseEvent(lease events.Lease, reason events.Reason) *events.LeaseEvent {
	ev := &events.LeaseEvent{ID: leaseID{Proxy: lease.Proxy, Slot: lease.Slot, Token: lease.Token}.String(),
		Holder: lease.Holder, Target: lease.Target, Until: lease.ExpiresAt}
	if reason != events.ReasonGranted && reason != events.ReasonRenewed {
		ev.AcquiredAt = lease.AcquiredAt
	}
	return ev
}

// originOf is what the lease statistics carry of proxy besides its name.
func (v *view) originOf(proxy string) origin {
	o := v.fleet.Origin(proxy)
	return origin{provider: o.Provider, pool: o.Pool}
}

// deleteLease releases id's slot if it still holds this grant. It reports false, without
// error, when the lease is gone or belongs to someone else (release is idempotent), with
// why in words.
func (l *Leaser) deleteLease(ctx context.Context, id leaseID) (released bool, why string, err error) {
	key := events.SlotKey(id.Proxy, id.Slot)
	if l.shards.stalled(id.Proxy) {
		return false, "", fmt.Errorf("release %s: %w", key, errShardStalled)
	}
	// The view usually holds the grant (this replica made it, or the watch brought it): a
	// delete at the revision it knows is as exact as one after a read, and one call fewer.
	// If the slot changed since, the delete fails and the read below decides.
	rec, rev, known := l.view.heldLease(key, id.Token)
	if known {
		if err := checkCaller(ctx, id, rec); err != nil {
			return false, reasonOf(err), nil // someone else's: released:false, as for a lease that is gone
		}
	}
	for try := range casRetries + 1 { // the first may only find the view behind
		if try > 0 || !known {
			var err error
			rec, rev, err = l.readLeaseAfter(ctx, id, try > 0)
			var ae *apiError
			if errors.As(err, &ae) {
				return false, ae.msg, nil
			}
			if err != nil {
				return false, "", err
			}
		}
		// At rev only: if the lease expired and was granted again since the read, this fails
		// instead of removing the new holder's lease.
		wctx, cancel := l.shards.writeContext(ctx)
		err := kvstore.DeleteAt(wctx, l.cfg.Buckets.Leases.Of(id.Proxy), key, rev)
		cancel()
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return false, "", l.shards.failed(ctx, id.Proxy, fmt.Errorf("delete %s: %w", key, err))
		}
		l.view.noteReleased(key, rev)
		l.dropHold(ctx, rec.Hold) // after the slot: a holder never has more leases than holder slots
		l.revoke(ctx, rec, events.ReasonReleased)
		rec.ExpiresAt = l.now()
		l.emitLease(events.ReasonReleased, "released:"+id.String(), rec, 0)
		l.log.Debug("lease released", "id", id.String())
		return true, "", nil
	}
	return false, "", errors.New("the slot kept changing during release")
}

// reasonOf is an API error's message, for a reply that carries it as a reason.
func reasonOf(err error) string {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae.msg
	}
	return err.Error()
}

// heldLease returns the grant the view holds in slot key if its token is token.
func (v *view) heldLease(key, token string) (events.Lease, uint64, bool) {
	proxy, slot, ok := parseSlotKey(key)
	if !ok {
		return events.Lease{}, 0, false
	}
	s, held := v.fleet.Slot(proxy, slot)
	if !held || s.Rev == 0 || s.Lease.Token != token {
		return events.Lease{}, 0, false
	}
	return s.Lease, s.Rev, true
}

// renewTTL is the TTL of a renewal: ttlSeconds, or the lease's own TTL when it is 0 (clamped to
// the current bounds, which may have changed since the grant).
func (l *Leaser) renewTTL(seconds int, rec events.Lease) time.Duration {
	if seconds != 0 {
		return time.Duration(seconds) * time.Second
	}
	d := time.Duration(rec.TTLSeconds) * time.Second
	if d == 0 {
		d = l.cfg.DefaultTTL
	}
	return min(max(d, l.cfg.MinTTL), l.cfg.MaxTTL)
}

// goneElsewhere is goneError once the slot's last entry is read and folded into the view as
// the watch would fold it (resyncProxies does the same for a shard whose watch stands still):
// another leaser may have ended the lease and noted why on the marker that removed the slot,
// before this replica's watch brought it, and the holder must hear 410 with the reason from
// every replica, not 404 from the one that is behind. One direct get, only on the path of a
// renewal, release or report that finds the slot empty; nil when the read fails.
func (l *Leaser) goneElsewhere(ctx context.Context, id leaseID, key string) error {
	if !l.foldLast(ctx, id, key) {
		return nil
	}
	return l.goneError(id)
}

// foldLast reads the slot key's last entry and folds it into the view as the watch would;
// false when the read fails.
func (l *Leaser) foldLast(ctx context.Context, id leaseID, key string) bool {
	rctx, cancel := l.shards.writeContext(ctx)
	defer cancel()
	kv := l.cfg.Buckets.Leases.Of(id.Proxy)
	s, err := l.shardStream(rctx, kv)
	if err != nil {
		return false
	}
	e, err := kvstore.LastEntry(rctx, s, kv, key)
	if err != nil {
		return false
	}
	l.waking(l.applyLease)(e)
	return true
}

// shardStream is the handle of kv's stream, asked for once (a stream info request) and kept.
func (l *Leaser) shardStream(ctx context.Context, kv jetstream.KeyValue) (jetstream.Stream, error) {
	if s, ok := l.streams.Load(kv.Bucket()); ok {
		return s.(jetstream.Stream), nil
	}
	s, err := l.cfg.Buckets.JS.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, err
	}
	l.streams.Store(kv.Bucket(), s)
	return s, nil
}
