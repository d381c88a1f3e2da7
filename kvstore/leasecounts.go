package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadLeaseEvents hands fn every lease and report event stored on EGRESS_LEASE_EVENTS from
// from to to (the server's store times; a zero to means now), in the order they were stored.
// Its cost is the number of events in the window, and a window older than the stream's limits
// has only what is still kept. Which lease events are stored one by one depends on the
// leasers' raw mode (events.RawLeaseEvents); ReadLeaseStats has them all. Events that do not
// decode are skipped.
func ReadLeaseEvents(ctx context.Context, js jetstream.JetStream, from, to time.Time, fn func(events.Event)) error {
	if err := readEventWindow(ctx, js, events.StreamLeaseEvents, from, to, fn); err != nil {
		return fmt.Errorf("read lease events: %w", err)
	}
	return nil
}

// ReadPoolEvents hands fn every pool event (the pool controller's decisions, events.KindPool)
// stored on EGRESS_EVENTS from from to to (a zero to means now), oldest first; none when the
// stream does not exist yet. Its cost is the pool events in the window: other kinds of events
// are filtered out by the server.
func ReadPoolEvents(ctx context.Context, js jetstream.JetStream, from, to time.Time, fn func(events.Event)) error {
	err := readEventWindow(ctx, js, events.StreamEvents, from, to, fn, events.EventSubject(events.KindPool, ">"))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("read pool events: %w", err)
	}
	return nil
}

// readEventWindow is readWindow over a stream of events.Event, skipping those that do not
// decode.
func readEventWindow(ctx context.Context, js jetstream.JetStream, stream string, from, to time.Time, fn func(events.Event), subjects ...string) error {
	return readWindow(ctx, js, stream, from, to, func(data []byte) {
		var ev events.Event
		if json.Unmarshal(data, &ev) == nil {
			fn(ev)
		}
	}, subjects...)
}

// windowBatch is how many messages one fetch of a window read asks for.
const windowBatch = 512

// readWindow hands fn every message stream stored from from to to (a zero to means now), in
// order, reading the window once with an ordered consumer; only those on subjects, if any
// are given.
func readWindow(ctx context.Context, js jetstream.JetStream, stream string, from, to time.Time, fn func([]byte), subjects ...string) error {
	if to.IsZero() {
		to = time.Now()
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
		FilterSubjects: subjects, InactiveThreshold: 30 * time.Second,
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
