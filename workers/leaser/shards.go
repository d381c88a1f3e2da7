package leaser

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/kvstore"
)

// DefaultSlotWriteBudget is how long an acquire waits for a slot write on one shard before it
// moves on to a candidate in another: a few hundred times a write's p99 on an R3 bucket
// (about 0.7 ms), and far under the 4–9 s a shard whose stream leader died stays without one.
const DefaultSlotWriteBudget = 300 * time.Millisecond

// stallHold is how long a shard whose slot write failed or ran over its budget is tried only
// after the candidates of the other shards; then one acquire probes it again.
const stallHold = time.Second

// errShardStalled marks a slot write that failed or ran out of its budget on a shard that
// may have no stream leader: the acquire moves on to another shard.
var errShardStalled = errors.New("lease shard stalled")

// shardHealth remembers, per lease shard, until when it counts as stalled.
type shardHealth struct {
	shards kvstore.LeaseShards
	until  []atomic.Int64 // unix nanoseconds
	budget time.Duration
}

func newShardHealth(s kvstore.LeaseShards, budget time.Duration) *shardHealth {
	return &shardHealth{shards: s, until: make([]atomic.Int64, s.Len()), budget: budget}
}

// stalled reports whether proxy's shard stalled a write in the last stallHold.
func (h *shardHealth) stalled(proxy string) bool {
	return len(h.until) > 1 && time.Now().UnixNano() < h.until[h.shards.Index(proxy)].Load()
}

func (h *shardHealth) markStalled(proxy string) {
	h.until[h.shards.Index(proxy)].Store(time.Now().Add(stallHold).UnixNano())
}

// writeContext bounds one slot write. With a single shard there is nowhere to move on to, so
// the write has the whole request's budget, as has a patient one (the acquire's last resort).
func (h *shardHealth) writeContext(ctx context.Context, patient bool) (context.Context, context.CancelFunc) {
	if len(h.until) <= 1 || patient {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, h.budget)
}
