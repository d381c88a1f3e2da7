package leaser

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// emitter publishes events to EGRESS_EVENTS from one goroutine, so a request never waits on
// the stream. Events are for people and dashboards: when the buffer is full (the stream is
// unreachable for long) new ones are dropped and counted in the log rather than slowing leases.
type emitter struct {
	js  jetstream.JetStream
	log *slog.Logger
	ch  chan events.Event
}

const (
	emitBuffer = 4096
	emitBudget = 5 * time.Second // one publish, and the final flush together
)

func newEmitter(js jetstream.JetStream, log *slog.Logger) *emitter {
	return &emitter{js: js, log: log, ch: make(chan events.Event, emitBuffer)}
}

// emit queues ev. Its ID is also the Nats-Msg-Id, so the stream drops a duplicate.
func (e *emitter) emit(ev events.Event) {
	ev.V = 1
	select {
	case e.ch <- ev:
	default:
		e.log.Warn("event dropped: buffer full", "kind", ev.Kind, "reason", ev.Reason, "proxy", ev.Proxy)
	}
}

// emitWindow bounds the events published and not yet acknowledged: enough to keep the stream
// busy without a round trip per event, few enough that a stalled stream is noticed.
const emitWindow = 256

// run publishes until ctx ends, then flushes what is queued within emitBudget. Publishes are
// asynchronous (the server acknowledges them in order); one goroutine owned here checks the
// acknowledgements and logs failures, so a lease cycle never waits on its events.
func (e *emitter) run(ctx context.Context) {
	acks := make(chan ack, emitWindow)
	done := make(chan struct{})
	go func() { defer close(done); e.check(acks) }()
	defer func() { close(acks); <-done }()
	for {
		select {
		case ev := <-e.ch:
			e.publish(ctx, ev, acks)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), emitBudget)
			defer cancel()
			for fctx.Err() == nil {
				select {
				case ev := <-e.ch:
					e.publish(fctx, ev, acks)
				default:
					return
				}
			}
			return
		}
	}
}

// ack is one published event waiting for the stream's acknowledgement.
type ack struct {
	f  jetstream.PubAckFuture
	ev events.Event
}

func (e *emitter) check(acks <-chan ack) {
	for a := range acks {
		select {
		case <-a.f.Ok():
		case err := <-a.f.Err():
			e.log.Warn("publish event", "kind", a.ev.Kind, "reason", a.ev.Reason, "proxy", a.ev.Proxy, "err", err)
		case <-time.After(emitBudget):
			e.log.Warn("publish event: no acknowledgement", "kind", a.ev.Kind, "reason", a.ev.Reason, "proxy", a.ev.Proxy)
		}
	}
}

func (e *emitter) publish(ctx context.Context, ev events.Event, acks chan<- ack) {
	b, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("encode event", "err", err)
		return
	}
	f, err := e.js.PublishAsync(events.EventSubject(ev.Kind, ev.Proxy), b, jetstream.WithMsgID(ev.ID))
	if err != nil {
		e.log.Warn("publish event", "kind", ev.Kind, "reason", ev.Reason, "proxy", ev.Proxy, "err", err)
		return
	}
	select {
	case acks <- ack{f: f, ev: ev}:
	case <-ctx.Done():
	}
}
