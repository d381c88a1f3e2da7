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

// renew restarts a lease's TTL. KV Update would drop the per-key TTL, so the record is
// rewritten with kvstore.PutTTL at the revision just read: a renewal can never revive a slot
// that expired or was granted again in between. The ID does not change.
func (l *Leaser) renew(ctx context.Context, data []byte) (any, error) {
	r, id, err := l.decodeRenew(data)
	if err != nil {
		return nil, err
	}
	key := events.SlotKey(id.Proxy, id.Slot)
	if l.shards.stalled(id.Proxy) {
		return nil, l.shardUnavailable("lease "+id.String()+" cannot be renewed now", l.shardOf(id.Proxy), nil)
	}
	for try := range casRetries {
		rec, rev, err := l.readLeaseAfter(ctx, id, try > 0)
		if err != nil {
			return nil, err
		}
		if gone := endedError(id, l.view.staleLease(key, rev, rec)); gone != nil {
			return nil, gone // its proxy went: the sweeper removes the slot
		}
		t, known, inRange := l.view.fleet.Endpoint(id.Proxy, id.Slot)
		switch {
		case !known:
			return nil, &apiError{code: events.CodeConflict, field: "id",
				msg: fmt.Sprintf("lease %s cannot be renewed: proxy %s was deleted or its spec is invalid", id, id.Proxy)}
		case !inRange:
			// maxLeases was lowered: the slots above it drain by running out.
			return nil, &apiError{code: events.CodeConflict, field: "id",
				msg: fmt.Sprintf("lease %s cannot be renewed: proxy %s's maxLeases was lowered and slot %d is draining", id, id.Proxy, id.Slot)}
		}
		ttl := l.renewTTL(r.TTLSeconds, rec)
		rec.TTLSeconds = int(ttl / time.Second)
		rec.ExpiresAt = l.now().Add(ttl)
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		// The holder slot first, so that it outlives the proxy slot whatever fails between.
		if err := l.renewHold(ctx, rec, ttl); err != nil {
			return nil, fmt.Errorf("renew the holder slot of %s: %w", key, err)
		}
		wctx, cancel := l.shards.writeContext(ctx)
		nrev, err := kvstore.PutTTL(wctx, l.cfg.Buckets.JS, l.cfg.Buckets.Leases.Of(id.Proxy), key, b, rev, ttl)
		cancel()
		if errors.Is(err, kvstore.ErrConflict) {
			continue // renewed (or released) concurrently: read again
		}
		if err = l.shards.failed(ctx, id.Proxy, err); errors.Is(err, errShardStalled) {
			// The write may still land: the retry reads it and renews again.
			return nil, l.shardUnavailable("lease "+id.String()+" cannot be renewed now", l.shardOf(id.Proxy), nil)
		}
		if err != nil {
			return nil, fmt.Errorf("renew %s: %w", key, err)
		}
		l.wroteSlot(key, nrev, rec)
		l.emitLease(events.ReasonRenewed, fmt.Sprintf("renewed:%s:%d", id, nrev), rec, nrev)
		return events.LeaseReply{Lease: l.grant(id.String(), rec, t)}, nil
	}
	return nil, errors.New("the slot kept changing during renewal")
}

// release ends a lease. Releasing a lease that is gone or someone else's answers
// released:false: the caller's goal, not holding it, is met either way.
func (l *Leaser) release(ctx context.Context, data []byte) (any, error) {
	_, id, err := decodeRelease(data)
	if err != nil {
		return nil, err
	}
	ok, why, err := l.deleteLease(ctx, id)
	if err != nil {
		return nil, l.stalledRelease(id, err)
	}
	return events.ReleaseReply{Released: ok, Reason: why}, nil
}
