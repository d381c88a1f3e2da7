package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// eventsConsumerIdle is how long the server keeps a page's ordered consumer after its last
// use. The page also deletes it when done; this only bounds what a dropped request leaves.
const eventsConsumerIdle = 30 * time.Second

// readRecentEvents returns the last n events of EGRESS_EVENTS, newest first: the lifecycle,
// which lease events, on a stream of their own, cannot crowd out. It starts an
// ordered consumer at LastSeq-n+1, so the cost is n messages whatever the stream's length. A
// stream that does not exist yet reads as no events.
func readRecentEvents(ctx context.Context, js jetstream.JetStream, n int) ([]EventRow, error) {
	if js == nil {
		return nil, errors.New("read events: no JetStream context")
	}
	stream, err := js.Stream(ctx, events.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
	}
	state := stream.CachedInfo().State
	if state.Msgs == 0 {
		return nil, nil
	}
	start := state.FirstSeq
	if state.LastSeq >= uint64(n) {
		start = max(start, state.LastSeq-uint64(n)+1)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: eventsConsumerIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			// Also after a timed-out request, but never holding the response for long.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = js.DeleteConsumer(dctx, events.StreamEvents, info.Name)
		}
	}()
	// No-wait: the messages from start are already stored, so the server sends what it has
	// and ends the batch instead of holding the request open until a timeout.
	batch, err := cons.FetchNoWait(n)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
	}
	var rows []EventRow
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read stream %s: %w", events.StreamEvents, ctx.Err())
		case m, ok := <-batch.Messages():
			if !ok {
				if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
					return nil, fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
				}
				slices.Reverse(rows) // newest first
				return rows, nil
			}
			rows = append(rows, eventRow(m))
		}
	}
}

// eventRow decodes one message. An event that does not decode still gets a row, from its
// subject and stored time, so a gap in the list is never silent; its body is not shown.
func eventRow(m jetstream.Msg) EventRow {
	r := EventRow{Subject: m.Subject()}
	if md, err := m.Metadata(); err == nil {
		r.Seq, r.At = md.Sequence.Stream, md.Timestamp
	}
	// egress.events.<kind>.<proxy>
	if parts := strings.SplitN(m.Subject(), ".", 4); len(parts) == 4 {
		r.Kind, r.Proxy = parts[2], parts[3]
	}
	var ev events.Event
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		r.Summary = "(an event that could not be decoded)"
		return r
	}
	if !ev.At.IsZero() {
		r.At = ev.At
	}
	if ev.Kind != "" {
		r.Kind = string(ev.Kind)
	}
	if ev.Proxy != "" {
		r.Proxy = ev.Proxy
	}
	r.Summary = ev.Summary()
	return r
}
