package reconciler

import (
	"context"
	"time"

	"github.com/egressd/egressd/kvstore"
)

// DefaultLeaseSpreadInterval is how often the leader checks where the lease shards' stream
// leaders are.
const DefaultLeaseSpreadInterval = 30 * time.Second

// spreadLeaseLeaders keeps the lease shards' stream leaders on different servers while this
// process leads. The shards exist so that a server's crash stalls only its share of the
// leases (docs/leases.md#shards); but the survivors take over the crashed server's leaders and
// nats-server never hands them back, so after one crash and restart a second crash would
// stall two shards of three. Each check costs one stream info per shard, and moves a leader
// only to a peer that is current, online and leads fewer, so a spread fleet sees no step-down.
func (l *loop) spreadLeaseLeaders(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var lastErr string // a failure is logged as a warning once, again only when it changes
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		leaders, moved, err := kvstore.SpreadLeaseLeaders(cctx, l.r.cfg.Buckets.JS, l.r.cfg.Buckets.Leases)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && err.Error() != lastErr:
			// Also a deployment whose reconciler user may not step a leader down (its request
			// times out): then egressd setup, run by the admin after a server restart, spreads them.
			l.log.Warn("cannot spread the lease shards' leaders over the servers (the reconciler user needs $JS.API.STREAM.LEADER.STEPDOWN.KV_proxy_leases*, deploy/nats)", "err", err)
			lastErr = err.Error()
		case err != nil:
			l.log.Debug("spreading the lease shards' leaders", "err", err)
		case moved > 0:
			l.log.Info("lease shard leaders spread over the servers again", "moved", moved, "leaders", leaders)
			lastErr = ""
		default:
			lastErr = ""
		}
	}
}
