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

// run publishes until ctx ends, then flushes what is queued within emitBudget.
func (e *emitter) run(ctx context.Context) {
	for {
		select {
		case ev := <-e.ch:
			e.publish(ctx, ev)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), emitBudget)
			defer cancel()
			for fctx.Err() == nil {
				select {
				case ev := <-e.ch:
					e.publish(fctx, ev)
				default:
					return
				}
			}
			return
		}
	}
}

func (e *emitter) publish(ctx context.Context, ev events.Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("encode event", "err", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, emitBudget)
	defer cancel()
	if _, err := e.js.Publish(pctx, events.EventSubject(ev.Kind, ev.Proxy), b, jetstream.WithMsgID(ev.ID)); err != nil {
		e.log.Warn("publish event", "kind", ev.Kind, "reason", ev.Reason, "proxy", ev.Proxy, "err", err)
	}
}
