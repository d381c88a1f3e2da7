package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// settleIdle is how long Latest lets the watch be quiet, after a watcher's initial values and
// short of the entries that complete them (see Latest), before it asks the stream whether
// those entries were removed (removedUpTo).
const settleIdle = 250 * time.Millisecond

// Latest returns the latest entry of every key of kv; deleted and expired keys are left out.
// A watcher delivers them all in one ordered pass and then a nil marker, which is cheaper
// than a Get per listed key.
//
// The marker alone is not enough while the bucket is being written: a key rewritten during
// the pass loses the message the pass was about to deliver (History 1 keeps only the newest)
// and its new one can come just after the marker, so the key would be missing (seen: 1–3 keys
// of 2,000 under a few thousand writes a second). So Latest reads the stream's last sequence
// at the marker and goes on reading until it has seen that far: every key that existed then
// is in the result, at its value then or later.
func Latest(ctx context.Context, kv jetstream.KeyValue) (map[string]jetstream.KeyValueEntry, error) {
	if kv == nil {
		return nil, errors.New("a bucket is not open")
	}
	w, err := openWatch(ctx, kv, nil)
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	// Latest stops reading as soon as it has what it needs, often with entries still coming.
	defer func() { _ = w.Stop() }()
	out := map[string]jetstream.KeyValueEntry{}
	var seen, last uint64 // highest revision delivered; the stream's last sequence at the marker
	settled := false
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for {
		if settled && seen >= last {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), ctx.Err())
		case <-idle.C:
			// Nothing came for a while short of last: either the messages up to it were
			// removed, or their delivery is slow (a loaded machine).
			gone, err := removedUpTo(ctx, kv, last)
			if err != nil {
				return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
			}
			if gone {
				return out, nil
			}
			idle.Reset(settleIdle)
		case e, ok := <-w.Updates():
			c, err := w.Take(e, ok)
			if err != nil {
				return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
			}
			if c.Synced {
				st, err := kv.Status(ctx)
				if err != nil {
					return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
				}
				if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo().State.Msgs > 0 {
					last = s.StreamInfo().State.LastSeq
				}
				settled = true
				idle.Reset(settleIdle)
				continue
			}
			seen = max(seen, e.Revision())
			if c.Removed {
				delete(out, e.Key())
			} else {
				out[e.Key()] = e
			}
			if settled {
				idle.Reset(settleIdle)
			}
		}
	}
}

// removedUpTo reports whether the messages Latest still waits for (up to the sequence last)
// can have been removed without a marker being delivered. Limits remove the oldest first, so
// when the message at last went that way the stream now starts after it (or is empty): known
// exactly. Per-key TTLs remove a message out of order, the last one too (an expired key's
// marker expires in turn, leaving nothing to deliver), which the stream's state cannot tell
// from a slow delivery: in such a bucket a quiet watch is taken to be done. Anywhere else
// the messages exist and come; Latest waits for them (within ctx) rather than return a bucket
// without some keys, which for proxy_status would let the collector take a live instance for
// an orphan.
func removedUpTo(ctx context.Context, kv jetstream.KeyValue, last uint64) (bool, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return false, err
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return true, nil // not a stream-backed bucket: nothing to ask, as before
	}
	info := s.StreamInfo()
	if info.State.Msgs == 0 || info.State.FirstSeq > last {
		return true, nil
	}
	return info.Config.AllowMsgTTL, nil
}
