package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// attempts counts the real attempts of ops: those that ran the op and published a result.
// A delivery that found the op lock busy, or was abandoned (lost lock, shutdown), publishes
// nothing and so spends none of the OpsMaxAttempts budget; the message's delivery count,
// which the server raises for every redelivery, counts those too and would fail an op that
// never ran.
//
// The count is read back from the stream, not kept anywhere: the provisioner publishes every
// result before it settles the message, so the last op result of the proxy on EGRESS_EVENTS
// is that of the last attempt that finished. It is read while holding the proxy's op lock, so
// no other attempt of an op on this proxy can publish in between.
type attempts struct {
	js jetstream.JetStream

	mu     sync.Mutex
	stream jetstream.Stream // EGRESS_EVENTS, bound on first use
}

// next is the number of the attempt about to run: one more than the attempt of the proxy's
// last op result if that result is of this op, else 1. It reads from the stream's leader (no
// direct get, which a replica may answer from behind).
func (a *attempts) next(ctx context.Context, op events.Op) (int, error) {
	s, err := a.bind(ctx)
	if err != nil {
		return 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, events.EventSubject(events.KindOpResult, op.Proxy))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the last op result of %s: %w", op.Proxy, err)
	}
	var ev events.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Op == nil || ev.Op.OpID != op.ID {
		return 1, nil // another op's result (or none we can read): this op has not run yet
	}
	return ev.Op.Attempt + 1, nil
}

func (a *attempts) bind(ctx context.Context) (jetstream.Stream, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stream != nil {
		return a.stream, nil
	}
	s, err := a.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", events.StreamEvents, err)
	}
	a.stream = s
	return s, nil
}

// attemptOf is the attempt number of this delivery of op. If the count cannot be read, the
// delivery count stands in: it may end an op early, but it never retries one for ever.
func (p *Provisioner) attemptOf(ctx context.Context, op events.Op, delivered int) int {
	actx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
	defer cancel()
	n, err := p.attempts.next(actx, op)
	if err != nil {
		p.cfg.Log.Warn("attempt count unreadable; counting deliveries", "proxy", op.Proxy, "opId", op.ID, "delivery", delivered, "err", err)
		return delivered
	}
	return n
}
