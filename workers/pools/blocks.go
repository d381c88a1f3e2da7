package pools

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// blocks counts, per proxy, the distinct targets crawlers reported it blocked on, from the
// lease service's report events. A restarted controller replays the window from
// EGRESS_LEASE_EVENTS, so a leader change loses no report the stream still keeps (its limits,
// events.leases in the config, bound how far back that reaches).
type blocks struct {
	mu   sync.Mutex
	last map[string]map[string]time.Time // proxy → target → latest blocked report
}

func newBlocks() *blocks { return &blocks{last: map[string]map[string]time.Time{}} }

func (b *blocks) note(ev events.Event) {
	if ev.Kind != events.KindReport || ev.Reason != events.Reason(events.ReportBlocked) || ev.Lease == nil || ev.Lease.Target == "" {
		return // a block on every target says nothing about how many sites block it
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.last[ev.Proxy]
	if t == nil {
		t = map[string]time.Time{}
		b.last[ev.Proxy] = t
	}
	if ev.At.After(t[ev.Lease.Target]) {
		t[ev.Lease.Target] = ev.At
	}
}

// distinct is how many targets proxy was reported blocked on since since.
func (b *blocks) distinct(proxy string, since time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, at := range b.last[proxy] {
		if !at.Before(since) {
			n++
		}
	}
	return n
}

// prune forgets reports older than before, and proxies keep returns false for.
func (b *blocks) prune(before time.Time, keep func(proxy string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, t := range b.last {
		for target, at := range t {
			if at.Before(before) {
				delete(t, target)
			}
		}
		if len(t) == 0 || !keep(p) {
			delete(b.last, p)
		}
	}
}

// follow feeds b from the report events since start until ctx ends. It uses an ordered
// consumer, which the client recreates after a server restart from where it was.
func (b *blocks) follow(ctx context.Context, js jetstream.JetStream, start time.Time) error {
	c, err := js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject(events.KindReport, ">")},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
	})
	if err != nil {
		return fmt.Errorf("follow report events: %w", err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		var ev events.Event
		if json.Unmarshal(m.Data(), &ev) == nil {
			b.note(ev)
		}
	})
	if err != nil {
		return fmt.Errorf("follow report events: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
