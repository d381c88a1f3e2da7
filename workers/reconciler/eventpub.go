package reconciler

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Events are history, not commands: nothing waits for them, so the leader publishes them
// without waiting for their acks, and one goroutine reads the acks in publish order and logs
// any failure, as the synchronous publish did. The channel bounds what is in flight: when
// it is full the leader waits, so a slow server slows the leader instead of piling up.
const (
	maxPendingEvents = 1024
	ackBudget        = 5 * time.Second // for one ack, as for one synchronous publish
	drainBudget      = 2 * time.Second // for the acks still due when the leader stops
)

type pendingEvent struct {
	f  jetstream.PubAckFuture
	ev events.Event
}

type eventPublisher struct {
	js      jetstream.JetStream
	log     *slog.Logger
	pending chan pendingEvent
}

func newEventPublisher(js jetstream.JetStream, log *slog.Logger) *eventPublisher {
	return &eventPublisher{js: js, log: log, pending: make(chan pendingEvent, maxPendingEvents)}
}

// publish sends ev with a fresh ID as its Nats-Msg-Id; its ack is checked by run.
func (p *eventPublisher) publish(ctx context.Context, ev events.Event) {
	ev.ID = newID()
	if ev.Kind == events.KindPhase {
		p.log.Info("phase", "proxy", ev.Proxy, "from", ev.From, "to", ev.Phase, "reason", ev.Reason, "message", ev.Message)
	}
	b, _ := json.Marshal(ev)
	f, err := p.js.PublishAsync(events.EventSubject(ev.Kind, eventToken(ev.Proxy)), b, jetstream.WithMsgID(ev.ID))
	if err != nil {
		p.log.Warn("publish event", "proxy", ev.Proxy, "kind", ev.Kind, "err", err)
		return
	}
	select {
	case p.pending <- pendingEvent{f: f, ev: ev}:
	case <-ctx.Done():
		p.log.Warn("publish event: leader stopped before its ack", "proxy", ev.Proxy, "kind", ev.Kind, "id", ev.ID)
	}
}

// run checks the acks in order until the leader closes the channel (it publishes nothing
// after); once ctx has ended, the acks still due get drainBudget in all.
func (p *eventPublisher) run(ctx context.Context) {
	actx := ctx
	for pe := range p.pending {
		if ctx.Err() != nil && actx == ctx {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainBudget)
			defer cancel()
			actx = dctx
		}
		p.check(actx, pe)
	}
}

func (p *eventPublisher) check(ctx context.Context, pe pendingEvent) {
	actx, cancel := context.WithTimeout(ctx, ackBudget)
	defer cancel()
	if _, err := kvstore.Await(actx, pe.f); err != nil {
		p.log.Warn("publish event", "proxy", pe.ev.Proxy, "kind", pe.ev.Kind, "id", pe.ev.ID, "err", err)
	}
}
