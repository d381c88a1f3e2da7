package prober

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// record folds o into the proxy's health record and writes it at the revision it read, so two
// probers racing on one proxy cannot lose an update: the loser re-reads and re-applies once.
// It returns the record written and whether it is a transition.
func (p *Prober) record(ctx context.Context, o observation) (events.ProxyHealth, bool, error) {
	ttl := ttlFor(o.check)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, kvBudget)
		prev, rev, err := p.readHealth(rctx, o.proxy)
		cancel()
		if err != nil {
			return events.ProxyHealth{}, false, err
		}
		next, transition := nextHealth(prev, o)
		b, err := json.Marshal(next)
		if err != nil {
			return events.ProxyHealth{}, false, err
		}
		wctx, cancel := context.WithTimeout(ctx, kvBudget)
		if rev == 0 {
			_, err = kvstore.CreateTTL(wctx, p.cfg.Store.Health, o.proxy, b, ttl)
		} else {
			_, err = kvstore.PutTTL(wctx, p.cfg.Store.JS, p.cfg.Store.Health, o.proxy, b, rev, ttl)
		}
		cancel()
		if errors.Is(err, kvstore.ErrConflict) && attempt < 2 {
			continue
		}
		if err != nil {
			return events.ProxyHealth{}, false, fmt.Errorf("write health of %s: %w", o.proxy, err)
		}
		return next, transition, nil
	}
}

// readHealth returns the current record (nil when there is none, or when it does not decode:
// the next write replaces it) and its revision (0 when absent).
func (p *Prober) readHealth(ctx context.Context, proxy string) (*events.ProxyHealth, uint64, error) {
	raw, rev, err := kvstore.Get(ctx, p.cfg.Store.Health, proxy)
	if errors.Is(err, kvstore.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read health of %s: %w", proxy, err)
	}
	var h events.ProxyHealth
	if err := json.Unmarshal(raw, &h); err != nil {
		p.log.Warn("replacing an undecodable health record", "proxy", proxy, "err", err)
		return nil, rev, nil
	}
	return &h, rev, nil
}

// publishTransition tells EGRESS_EVENTS that the proxy turned healthy or unhealthy. The
// message ID makes a retried publish a duplicate the stream drops.
func (p *Prober) publishTransition(ctx context.Context, h events.ProxyHealth) error {
	ev := events.Event{V: 1, ID: newID(), Kind: events.KindHealth, Proxy: h.Proxy, At: h.LastProbeAt,
		Reason: "Unhealthy", Message: h.LastError, Health: &h}
	if h.Healthy {
		ev.Reason, ev.Message = "Healthy", ""
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, kvBudget)
	defer cancel()
	if _, err := p.cfg.Store.JS.Publish(pctx, events.EventSubject(events.KindHealth, h.Proxy), b, jetstream.WithMsgID(ev.ID)); err != nil {
		return fmt.Errorf("publish health event of %s: %w", h.Proxy, err)
	}
	return nil
}

// newID is a random event ID.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}
