package reconciler

import (
	"context"
	"encoding/json"

	"github.com/egressd/egressd/events"
)

// Events are history, not commands: nothing waits for them, so the leader publishes them
// through a Publisher (kvstore), which checks their acks in order and logs any failure, as the
// synchronous publish did, and makes the leader wait when too many are in flight.
const maxPendingEvents = 1024

// publishEvent sends ev with a fresh ID as its Nats-Msg-Id.
func (l *loop) publishEvent(ctx context.Context, ev events.Event) {
	ev.ID = newID()
	if ev.Kind == events.KindPhase {
		l.log.Info("phase", "proxy", ev.Proxy, "from", ev.From, "to", ev.Phase, "reason", ev.Reason, "message", ev.Message)
	}
	b, _ := json.Marshal(ev)
	l.events.Publish(ctx, events.EventSubject(ev.Kind, eventToken(ev.Proxy)), b, ev.ID,
		"proxy", ev.Proxy, "kind", ev.Kind, "id", ev.ID)
}
