package kvstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseCount is what happened to the leases of one proxy for one target (empty: leases
// asked without a target) over a window: the raw material of a block rate by target.
type LeaseCount struct {
	Proxy, Target string
	Granted       int // leases granted
	Renewed       int
	Released      int
	Expired       int
	Ended         int // ended by the service: the proxy was deleted or replaced
	OK            int // reports
	Blocked       int
	Failed        int
}

// leaseCountBatch is how many events one fetch of CountLeaseEvents asks for.
const leaseCountBatch = 512

// CountLeaseEvents counts the lease and report events stored on EGRESS_LEASE_EVENTS from
// from to to (the server's store times; a zero to means now), by proxy and target, sorted by
// proxy then target. It reads the window once with an ordered consumer: its cost is the
// number of events in the window, and a window older than the stream's limits counts only
// what is still kept.
func CountLeaseEvents(ctx context.Context, js jetstream.JetStream, from, to time.Time) ([]LeaseCount, error) {
	if to.IsZero() {
		to = time.Now()
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("count lease events: %w", err)
	}
	type key struct{ proxy, target string }
	counts := map[key]*LeaseCount{}
	for done := false; !done; {
		// No-wait: the window is already stored, so a fetch ends with what the server has
		// instead of waiting for new events.
		batch, err := cons.FetchNoWait(leaseCountBatch)
		if err != nil {
			return nil, fmt.Errorf("count lease events: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Timestamp.After(to) {
				done = true
				continue // the rest of the batch is later still
			}
			if md.NumPending == 0 {
				done = true
			}
			var ev events.Event
			if json.Unmarshal(m.Data(), &ev) != nil || ev.Lease == nil {
				continue
			}
			k := key{ev.Proxy, ev.Lease.Target}
			c := counts[k]
			if c == nil {
				c = &LeaseCount{Proxy: k.proxy, Target: k.target}
				counts[k] = c
			}
			c.add(ev)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("count lease events: %w", err)
		}
		if n == 0 {
			done = true
		}
	}
	out := make([]LeaseCount, 0, len(counts))
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.proxy, b.proxy), cmp.Compare(a.target, b.target))
	}) {
		out = append(out, *counts[k])
	}
	return out, nil
}

func (c *LeaseCount) add(ev events.Event) {
	switch ev.Kind {
	case events.KindLease:
		switch ev.Reason {
		case events.ReasonGranted:
			c.Granted++
		case events.ReasonRenewed:
			c.Renewed++
		case events.ReasonReleased:
			c.Released++
		case events.ReasonExpired:
			c.Expired++
		default:
			c.Ended++
		}
	case events.KindReport:
		switch ev.Lease.Result {
		case events.ReportOK:
			c.OK++
		case events.ReportBlocked:
			c.Blocked++
		case events.ReportFailed:
			c.Failed++
		}
	}
}
