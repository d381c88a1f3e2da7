package fleet

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseCount is what happened to the leases of one proxy for one target (empty: leases
// asked without a target) over a window: the raw material of a block rate by target.
type LeaseCount struct {
	Proxy, Target string
	events.LeaseCounts
}

// CountLeaseEvents counts the lease and report events stored on EGRESS_LEASE_EVENTS from
// from to to (the server's store times; a zero to means now), by proxy and target, sorted by
// proxy then target. Its cost is the number of events in the window, and a window older than
// the stream's limits counts only what is still kept. Which lease events are stored one by
// one depends on the leasers' raw mode (events.RawLeaseEvents); ReadLeaseStats has them all.
func CountLeaseEvents(ctx context.Context, js jetstream.JetStream, from, to time.Time) ([]LeaseCount, error) {
	type key struct{ proxy, target string }
	counts := map[key]*LeaseCount{}
	err := kvstore.ReadLeaseEvents(ctx, js, from, to, func(ev events.Event) {
		if ev.Lease == nil {
			return
		}
		k := key{ev.Proxy, ev.Lease.Target}
		c := counts[k]
		if c == nil {
			c = &LeaseCount{Proxy: k.proxy, Target: k.target}
			counts[k] = c
		}
		switch ev.Kind {
		case events.KindLease:
			c.CountLease(ev.Reason)
		case events.KindReport:
			c.CountReport(ev.Lease.Result)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("count lease events: %w", err)
	}
	out := make([]LeaseCount, 0, len(counts))
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.proxy, b.proxy), cmp.Compare(a.target, b.target))
	}) {
		out = append(out, *counts[k])
	}
	return out, nil
}
