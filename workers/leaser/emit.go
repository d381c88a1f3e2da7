package leaser

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// emitter publishes events to EGRESS_EVENTS from one goroutine, so a request never waits on
// the stream. Events are for people and dashboards: when the buffer is full (the stream is
// unreachable for long) new ones are dropped and counted in the log rather than slowing
// leases. Publishes go through a kvstore.Publisher, without a round trip each, so the
// emitter keeps up with thousands of lease cycles a second.
type emitter struct {
	pub *kvstore.Publisher
	log *slog.Logger
	ch  chan queued
}

// queued is an event waiting for its publish; dedup sends its ID as the Nats-Msg-Id.
type queued struct {
	ev    events.Event
	dedup bool
}

const (
	emitBuffer = 4096
	emitWindow = 256             // publishes in flight, not yet acknowledged
	emitBudget = 5 * time.Second // the final flush of what is queued
)

func newEmitter(js jetstream.JetStream, log *slog.Logger) *emitter {
	return &emitter{pub: kvstore.NewPublisher(js, log, emitWindow), log: log, ch: make(chan queued, emitBuffer)}
}

// emit queues ev. Its ID is also the Nats-Msg-Id, so the stream drops a duplicate: for events
// every replica may write (an expiry, a lease ended with its proxy), one of them is kept.
func (e *emitter) emit(ev events.Event) { e.queue(ev, true) }

// emitUnique queues ev, an event only this replica writes (a grant, renewal or release it
// made, a report it took), without a Nats-Msg-Id: there is no duplicate to drop, and the
// server would keep each ID in memory for the whole duplicate window, which at the rate of
// lease cycles was most of the all-in-one's heap (docs/performance.md).
func (e *emitter) emitUnique(ev events.Event) { e.queue(ev, false) }

func (e *emitter) queue(ev events.Event, dedup bool) {
	ev.V = 1
	select {
	case e.ch <- queued{ev, dedup}:
	default:
		e.log.Warn("event dropped: buffer full", "kind", ev.Kind, "reason", ev.Reason, "proxy", ev.Proxy)
	}
}

// run publishes until ctx ends, then flushes what is queued within emitBudget and waits for
// the acks still due (the publisher bounds that wait too).
func (e *emitter) run(ctx context.Context) {
	var acks sync.WaitGroup
	acks.Go(func() { e.pub.Run(ctx) })
	defer acks.Wait()
	defer e.pub.Close()
	for {
		select {
		case q := <-e.ch:
			e.publish(ctx, q)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), emitBudget)
			defer cancel()
			for fctx.Err() == nil {
				select {
				case q := <-e.ch:
					e.publish(fctx, q)
				default:
					return
				}
			}
			return
		}
	}
}

func (e *emitter) publish(ctx context.Context, q queued) {
	ev := q.ev
	b, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("encode event", "err", err)
		return
	}
	msgID := ""
	if q.dedup {
		msgID = ev.ID
	}
	e.pub.Publish(ctx, events.EventSubject(ev.Kind, ev.Proxy), b, msgID, "kind", ev.Kind, "reason", ev.Reason, "proxy", ev.Proxy)
}
