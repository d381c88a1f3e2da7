package prober

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// record folds o into the proxy's health record and writes it at the revision it was known
// at (j's, else read now), so two probers racing on one proxy (during a hand-over) cannot lose
// an update: the loser re-reads and re-applies once. It returns the record written, its
// revision and what it changed.
func (p *Prober) record(ctx context.Context, j job, o observation) (events.ProxyHealth, uint64, changes, error) {
	ttl := ttlFor(o.check)
	prev, rev, known := j.prev, j.rev, j.known
	for attempt := 1; ; attempt++ {
		if !known {
			rctx, cancel := context.WithTimeout(ctx, kvBudget)
			var err error
			prev, rev, err = p.readHealth(rctx, o.proxy)
			cancel()
			if err != nil {
				return events.ProxyHealth{}, 0, changes{}, err
			}
		}
		next, ch := nextHealth(prev, o)
		b, err := json.Marshal(next)
		if err != nil {
			return events.ProxyHealth{}, 0, changes{}, err
		}
		wctx, cancel := context.WithTimeout(ctx, kvBudget)
		newRev, err := kvstore.WriteTTL(wctx, p.cfg.Buckets.JS, p.cfg.Buckets.Health, o.proxy, b, rev, ttl)
		cancel()
		if errors.Is(err, kvstore.ErrConflict) && attempt < 2 {
			known = false // someone else wrote (or the record expired): fold into theirs
			continue
		}
		if err != nil {
			return events.ProxyHealth{}, 0, changes{}, fmt.Errorf("write health of %s: %w", o.proxy, err)
		}
		return next, newRev, ch, nil
	}
}

// readHealth returns the current record (nil when there is none, or when it does not decode:
// the next write replaces it) and its revision (0 when absent).
func (p *Prober) readHealth(ctx context.Context, proxy string) (*events.ProxyHealth, uint64, error) {
	raw, rev, err := kvstore.Get(ctx, p.cfg.Buckets.Health, proxy)
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
		Reason: events.ReasonUnhealthy, Message: h.LastError, Health: &h}
	if h.Healthy {
		ev.Reason, ev.Message = events.ReasonHealthy, ""
	}
	return p.publishHealth(ctx, ev)
}

// publishAnonymityChange tells EGRESS_EVENTS that the proxy's anonymity verdict moved from
// was to the record's. The message names the headers, never their values.
func (p *Prober) publishAnonymityChange(ctx context.Context, was events.Anonymity, h events.ProxyHealth) error {
	msg := fmt.Sprintf("anonymity %s (was %s)", h.Anonymity, was)
	if len(h.LeakedHeaders) > 0 {
		msg += "; the sites see " + strings.Join(h.LeakedHeaders, ", ")
	}
	return p.publishHealth(ctx, events.Event{V: 1, ID: newID(), Kind: events.KindHealth, Proxy: h.Proxy,
		At: h.LastProbeAt, Reason: events.ReasonAnonymityChanged, Message: msg, Health: &h})
}

func (p *Prober) publishHealth(ctx context.Context, ev events.Event) error {
	h := ev.Health
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, kvBudget)
	defer cancel()
	if _, err := p.cfg.Buckets.JS.Publish(pctx, events.EventSubject(events.KindHealth, h.Proxy), b, jetstream.WithMsgID(ev.ID)); err != nil {
		return fmt.Errorf("publish health event of %s: %w", h.Proxy, err)
	}
	return nil
}

// announceLag publishes a prober event: this prober fell behind its schedule or caught up.
// It is published from a goroutine of its own so the schedule never waits on it; the event's
// budget bounds it, and a lost one is only a missed notice (the metrics carry the same).
func (p *Prober) announceLag(ctx context.Context, reason events.Reason, l load) {
	lag := events.ProberLag{Worker: p.cfg.Worker, Owned: l.owned, Backlog: l.backlog,
		LagSeconds: l.lag.Seconds(), Concurrency: p.cfg.Concurrency}
	ev := events.Event{V: 1, ID: newID(), Kind: events.KindProber, Proxy: p.member.ID, At: p.cfg.Now().UTC(),
		Reason: reason, Prober: &lag}
	if reason == events.ReasonProberBehind {
		p.log.Warn("prober behind its schedule", "lag", l.lag.Round(time.Millisecond), "backlog", l.backlog,
			"owned", l.owned, "concurrency", p.cfg.Concurrency)
	} else {
		p.log.Info("prober caught up", "lag", l.lag.Round(time.Millisecond), "backlog", l.backlog, "owned", l.owned)
	}
	p.publishProberEvent(ctx, ev)
}

// publishProberEvent publishes a prober event in the background (Run waits for it).
func (p *Prober) publishProberEvent(ctx context.Context, ev events.Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	p.background.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, kvBudget)
		defer cancel()
		if _, err := p.cfg.Buckets.JS.Publish(pctx, events.EventSubject(events.KindProber, p.member.ID), b,
			jetstream.WithMsgID(ev.ID)); err != nil && ctx.Err() == nil {
			p.log.Warn("prober event not published", "err", err)
		}
	})
}

// newID is a random event ID.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}
