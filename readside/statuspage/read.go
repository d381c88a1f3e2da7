package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// eventsConsumerIdle is how long the server keeps a page's ordered consumer after its last
// use. The page also deletes it when done; this only bounds what a dropped request leaves.
const eventsConsumerIdle = 30 * time.Second

// routineScan bounds how far back the page reads to fill its list past routine events: at
// most this many times the events it shows.
const routineScan = 10

// readRecentEvents returns the last n events of EGRESS_EVENTS that are not routine, newest
// first, and how many routine ones it left out among the newer ones (see routine): the
// lifecycle, which lease events, on a stream of their own, cannot crowd out, and which the
// provisioners' periodic gets must not either. It reads windows back from the stream's last
// sequence, each twice the one before, until it has n or has read routineScan times n
// messages, so the cost is n messages when nothing is routine. A stream that does not exist
// yet reads as no events.
func readRecentEvents(ctx context.Context, js jetstream.JetStream, n int) ([]EventRow, int, error) {
	if js == nil {
		return nil, 0, errors.New("read events: no JetStream context")
	}
	stream, err := js.Stream(ctx, events.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
	}
	state := stream.CachedInfo().State
	if state.Msgs == 0 {
		return nil, 0, nil
	}
	var rows []EventRow
	hidden, budget, size := 0, uint64(routineScan*n), uint64(n)
	for end := state.LastSeq; end >= state.FirstSeq && end > 0 && len(rows) < n && budget > 0; {
		size = min(size, budget, end-state.FirstSeq+1)
		start := end - size + 1
		batch, err := readEvents(ctx, js, stream, start, end)
		if err != nil {
			return nil, 0, err
		}
		for i := len(batch) - 1; i >= 0 && len(rows) < n; i-- {
			if batch[i].routine {
				hidden++
			} else {
				rows = append(rows, batch[i])
			}
		}
		budget -= size
		end, size = start-1, size*2
	}
	return rows, hidden, nil
}

// routine is a successful get: a provisioner read an instance as it polls them all, which
// changed nothing. It stays in the stream (`egressd events --kind op`); what a get found that
// matters is a phase or health event of its own.
func routine(ev events.Event) bool {
	return ev.Kind == events.KindOpResult && ev.Op != nil && ev.Op.Kind == events.OpGet && ev.Op.Error == "" && ev.Op.ErrorClass == ""
}

// readEvents reads the messages of the stream from start to end, oldest first, through an
// ordered consumer it deletes when done.
func readEvents(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, start, end uint64) ([]EventRow, error) {
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
	batch, err := cons.FetchNoWait(int(end - start + 1))
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
				return rows, nil
			}
			// A deleted message in the window lets a later one in, which the next window
			// (newer) already has.
			if r := eventRow(m); r.Seq <= end {
				rows = append(rows, r)
			}
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
	r.routine = routine(ev)
	return r
}
