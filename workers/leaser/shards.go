package leaser

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Shard health (decision 97). A node's crash leaves the streams it led without a leader for
// a Raft election, 4–9 s in nats-server, and every write to them waits that long. Requests
// are served one at a time per endpoint and replica, so a request that waited would hold up
// every request behind it. Instead, with several lease shards:
//
//   - a write to a shard has DefaultSlotWriteBudget; one that fails or runs over it marks the
//     shard suspect, and the request moves on (an acquire to a candidate of another shard) or
//     answers ShardUnavailable at once (503 with the retry hint);
//   - while a shard is suspect, requests skip it without writing: an acquire tries only the
//     other shards' candidates, a renew or release into it answers ShardUnavailable, and the
//     client tries again with backoff;
//   - one goroutine per replica (watchHealth) asks each suspect shard's stream for its info
//     every healthProbeEvery, which only a leader answers, and clears the mark once one does;
//     a probe that fails keeps the shard suspect for another stallHold, so requests never
//     pay for the probing. Probes renew a mark for at most probeRenewal after a request
//     made it; then it expires and the next request tries the shard itself (and marks it
//     again if it is still stalled), so a probe that fails for another reason than the
//     stall (a user that may not read stream info) never keeps a shard out for good.
//
// lease_state, which holds every acquire's request record, is watched the same way: while it
// is suspect a grant is answered without its record (requests.go). With one lease shard
// there is nowhere to move on to, and on a single server (streams of one replica) a write
// that runs slow is only slow, never waiting for an election, and all shards are on the one
// server anyway: then nothing is tracked, and writes keep the request's whole budget.

// DefaultSlotWriteBudget is how long a write to a lease shard (or an acquire's request
// record) may take before the shard counts as stalled: a few hundred times a write's p99 on
// an R3 bucket (about 0.7 ms), and far under the 4–9 s a stream whose leader died stays
// without one.
const DefaultSlotWriteBudget = 300 * time.Millisecond

const (
	// stallHold is how long a mark lasts unless a probe renews or clears it.
	stallHold = time.Second
	// healthProbeEvery is how often each suspect stream is asked for its info: a shard is
	// used again at most this long (plus a probe's round trip) after it has a leader.
	healthProbeEvery = 200 * time.Millisecond
	// probeRenewal is how long after a request marked a stream its probes may keep it
	// marked: longer than any election.
	probeRenewal = 20 * time.Second
)

// errShardStalled marks a write that failed or ran out of its budget on a shard that may
// have no stream leader, or a request that skipped a suspect shard.
var errShardStalled = errors.New("lease shard stalled")

// shardHealth remembers, per lease shard and for lease_state (the last entry), until when it
// counts as stalled.
type shardHealth struct {
	shards  kvstore.LeaseShards
	streams []jetstream.KeyValue // the shards, then lease_state
	until   []atomic.Int64       // unix nanoseconds; 0: healthy
	marked  []atomic.Int64       // unix nanoseconds: when a request last marked it
	budget  time.Duration
	wake    chan struct{}
	// replicated: the lease streams have more than one replica (watch finds out at start).
	replicated atomic.Bool
}

func newShardHealth(s kvstore.LeaseShards, state jetstream.KeyValue, budget time.Duration) *shardHealth {
	streams := append(append([]jetstream.KeyValue(nil), s.All()...), state)
	return &shardHealth{shards: s, streams: streams, until: make([]atomic.Int64, len(streams)),
		marked: make([]atomic.Int64, len(streams)), budget: budget, wake: make(chan struct{}, 1)}
}

// tracked: with one lease shard, or on a single server, nothing is skipped.
func (h *shardHealth) tracked() bool { return h.shards.Len() > 1 && h.replicated.Load() }

// stateIndex is lease_state's entry.
func (h *shardHealth) stateIndex() int { return len(h.until) - 1 }

func (h *shardHealth) suspect(i int) bool {
	return h.tracked() && time.Now().UnixNano() < h.until[i].Load()
}

// stalled reports whether proxy's shard is suspect.
func (h *shardHealth) stalled(proxy string) bool { return h.suspect(h.shards.Index(proxy)) }

// stateStalled reports whether lease_state is suspect.
func (h *shardHealth) stateStalled() bool { return h.suspect(h.stateIndex()) }

func (h *shardHealth) mark(i int) {
	now := time.Now()
	h.marked[i].Store(now.UnixNano())
	h.until[i].Store(now.Add(stallHold).UnixNano())
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *shardHealth) markStalled(proxy string) { h.mark(h.shards.Index(proxy)) }

func (h *shardHealth) markStateStalled() { h.mark(h.stateIndex()) }

// writeContext bounds one write to a shard (or to lease_state). With a single shard there is
// nowhere to move on to, so the write has the whole request's budget.
func (h *shardHealth) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if !h.tracked() {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, h.budget)
}

// failed says whether a write's err, under the request's ctx, marks proxy's shard stalled,
// and if so marks it and wraps err with errShardStalled. A refusal (a conflict, a key not
// found) is an answer from a leader, not a stall.
func (h *shardHealth) failed(ctx context.Context, proxy string, err error) error {
	if err == nil || !h.tracked() || ctx.Err() != nil || errors.Is(err, kvstore.ErrConflict) || errors.Is(err, kvstore.ErrNotFound) {
		return err
	}
	h.markStalled(proxy)
	return fmt.Errorf("%w: %w", errShardStalled, err)
}

// watch probes the suspect streams until ctx ends (see the top of this file).
func (h *shardHealth) watch(ctx context.Context) {
	if h.shards.Len() <= 1 {
		return
	}
	t := time.NewTicker(healthProbeEvery)
	defer t.Stop()
	for !h.replicated.Load() { // until the first shard's stream says how many replicas it has
		pctx, cancel := context.WithTimeout(ctx, h.budget)
		st, err := h.streams[0].Status(pctx)
		cancel()
		switch {
		case err == nil && st.Config().Replicas <= 1:
			return
		case err == nil:
			h.replicated.Store(true)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-t.C:
		}
		for i, kv := range h.streams {
			if h.until[i].Load() == 0 || ctx.Err() != nil {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, h.budget)
			_, err := kv.Status(pctx) // stream info: answered by the stream's leader only
			cancel()
			now := time.Now()
			switch {
			case err == nil:
				h.until[i].Store(0)
			case ctx.Err() != nil:
			case now.Sub(time.Unix(0, h.marked[i].Load())) < probeRenewal:
				h.until[i].Store(now.Add(stallHold).UnixNano())
			case now.UnixNano() >= h.until[i].Load():
				h.until[i].Store(0) // lapsed: the next request tries it itself
			}
		}
	}
}

// shardOf is proxy's shard as shardUnavailable takes it.
func (l *Leaser) shardOf(proxy string) map[int]int {
	return map[int]int{l.cfg.Buckets.Leases.Index(proxy): 0}
}

// stalledRelease is a release's err as the caller gets it: ShardUnavailable if the lease's
// shard is stalled. The delete may still land: a retry then finds the lease gone (released
// false), and otherwise releases it.
func (l *Leaser) stalledRelease(id leaseID, err error) error {
	if errors.Is(err, errShardStalled) {
		return l.shardUnavailable("lease "+id.String()+" cannot be released now", l.shardOf(id.Proxy), nil)
	}
	return err
}

// shardUnavailable is the answer of a request whose only way on lay in stalled shards:
// which shards and how many candidates it passed over for each (none for a renew or release).
func (l *Leaser) shardUnavailable(what string, skipped map[int]int, avail *events.Availability) *apiError {
	shards, n := slices.Sorted(maps.Keys(skipped)), 0
	for _, k := range skipped {
		n += k
	}
	msg := fmt.Sprintf("%s: lease shard %v has no stream leader right now (a NATS node was lost; an election takes seconds)", what, shards)
	if n > 0 {
		msg += fmt.Sprintf("; %d candidates passed over", n)
	}
	msg += "; retry"
	return &apiError{code: events.CodeUnavailable, reason: events.ErrorShardUnavailable, msg: msg, avail: avail, retry: true,
		shards: &events.ShardDetail{Stalled: shards, Skipped: n, Shards: l.cfg.Buckets.Leases.Len(), RetryAfterMs: int(healthProbeEvery / time.Millisecond)}}
}

// get reads key with a direct get, which any replica of the stream answers. A get in flight
// to a server as it dies is never answered, and would hold its request (and, one at a time
// per endpoint, every request behind it) for the whole request budget; so, with lease
// shards, each try has the write budget, and one that runs out is sent again, to whichever
// replica answers first now.
func (l *Leaser) get(ctx context.Context, kv kvstore.Getter, key string) ([]byte, uint64, error) {
	for {
		rctx, cancel := l.shards.writeContext(ctx)
		b, rev, err := kvstore.Get(rctx, kv, key)
		expired := rctx.Err() != nil
		cancel()
		if err == nil || !expired || ctx.Err() != nil || !l.shards.tracked() {
			return b, rev, err
		}
	}
}
