package kvstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes to a stream without waiting for each ack: for records that are
// history, not commands (events), where a writer doing thousands a second must not pay a
// round trip for each. One goroutine (Run) reads the acks in publish order and logs any
// failure. The number in flight is bounded: when it is reached, Publish waits, so a slow
// server slows the writer instead of piling up.
type Publisher struct {
	js      jetstream.JetStream
	log     *slog.Logger
	pending chan pendingPub
}

type pendingPub struct {
	f     jetstream.PubAckFuture
	attrs []any
}

// Budgets of a Publisher: one ack, as for one synchronous publish; and all the acks still due
// once Run's context has ended.
const (
	PublishAckBudget   = 5 * time.Second
	PublishDrainBudget = 2 * time.Second
)

// NewPublisher makes a publisher with at most maxPending publishes in flight. Run must run
// for Publish to make progress.
func NewPublisher(js jetstream.JetStream, log *slog.Logger, maxPending int) *Publisher {
	return &Publisher{js: js, log: log, pending: make(chan pendingPub, maxPending)}
}

// Publish sends data to subject with msgID as its Nats-Msg-Id (a repeat is a duplicate the
// stream drops); an empty msgID sends none, for a record no other writer can repeat: the
// server keeps every ID it saw for the stream's duplicate window, in memory, so IDs at
// thousands a second cost it hundreds of MB (docs/performance.md, bounded memory). attrs name the record in the log line of a failure. It returns at once
// unless maxPending publishes are in flight; if ctx ends while it waits, the publish stands
// but its ack goes unchecked, and that is logged.
func (p *Publisher) Publish(ctx context.Context, subject string, data []byte, msgID string, attrs ...any) {
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	f, err := p.js.PublishAsync(subject, data, opts...)
	if err != nil {
		p.log.Warn("publish", append(attrs, "subject", subject, "err", err)...)
		return
	}
	select {
	case p.pending <- pendingPub{f: f, attrs: attrs}:
	case <-ctx.Done():
		p.log.Warn("publish: stopped before its ack", append(attrs, "subject", subject)...)
	}
}

// Close ends Run once the acks in flight are checked. Nothing may be published after.
func (p *Publisher) Close() { close(p.pending) }

// Run checks the acks in order until Close. Once ctx has ended, the acks still due get
// PublishDrainBudget in all, so a stream that stopped acknowledging cannot hold a shutdown.
func (p *Publisher) Run(ctx context.Context) {
	// actx outlives ctx by PublishDrainBudget: the acks still due when ctx ends share it.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(PublishDrainBudget, cancel) })
	defer stop()
	for pp := range p.pending {
		cctx, cancelAck := context.WithTimeout(actx, PublishAckBudget)
		_, err := Await(cctx, pp.f)
		cancelAck()
		if err != nil {
			p.log.Warn("publish", append(pp.attrs, "subject", pp.f.Msg().Subject, "err", err)...)
		}
	}
}
