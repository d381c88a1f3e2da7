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
	events.LeaseCounts
}

// windowBatch is how many messages one fetch of a window read asks for.
const windowBatch = 512

// CountLeaseEvents counts the lease and report events stored on EGRESS_LEASE_EVENTS from
// from to to (the server's store times; a zero to means now), by proxy and target, sorted by
// proxy then target. Its cost is the number of events in the window, and a window older than
// the stream's limits counts only what is still kept. Which lease events are stored one by
// one depends on the leasers' raw mode (events.RawLeaseEvents); ReadLeaseStats has them all.
func CountLeaseEvents(ctx context.Context, js jetstream.JetStream, from, to time.Time) ([]LeaseCount, error) {
	type key struct{ proxy, target string }
	counts := map[key]*LeaseCount{}
	err := readWindow(ctx, js, events.StreamLeaseEvents, from, to, func(data []byte) {
		var ev events.Event
		if json.Unmarshal(data, &ev) != nil || ev.Lease == nil {
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

// readWindow hands fn every message stream stored from from to to (a zero to means now), in
// order, reading the window once with an ordered consumer.
func readWindow(ctx context.Context, js jetstream.JetStream, stream string, from, to time.Time, fn func([]byte)) error {
	if to.IsZero() {
		to = time.Now()
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	// Deleted when done rather than left to its inactivity threshold: the status page reads a
	// window on every reload, and each would leave a consumer on the server for 30 s.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = js.DeleteConsumer(dctx, stream, info.Name)
		}
	}()
	for done := false; !done; {
		// No-wait: the window is already stored, so a fetch ends with what the server has
		// instead of waiting for new messages.
		batch, err := cons.FetchNoWait(windowBatch)
		if err != nil {
			return err
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
			fn(m.Data())
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 {
			done = true
		}
	}
	return nil
}
