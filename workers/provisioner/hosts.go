package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Retries of a host consumer that cannot be bound: base·2^(n-1), capped.
const (
	bindRetryBase = 500 * time.Millisecond
	bindRetryMax  = 30 * time.Second
)

// serveHost binds the host's consumer and runs as many fetchers as the host's limit until
// ctx ends. The server's MaxAckPending holds the limit across processes, and Fetch(1) never
// buffers ops another process could run.
func (p *Provisioner) serveHost(ctx context.Context, host string) error {
	cons, err := p.bindHost(ctx, host)
	if err != nil || cons == nil {
		return err
	}
	limit := 1
	for _, h := range p.cfg.Catalog.Hosts {
		if h.Name == host {
			limit = max(h.MaxConcurrentOps, 1)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for range limit {
		g.Go(func() error { return p.fetchLoop(gctx, cons, host) })
	}
	return g.Wait()
}

// bindHost binds the host's consumer, retrying with backoff: a consumer that is not declared
// yet (roles start before `egressd setup`, or a host was added to the config before it ran),
// a JetStream cluster electing the stream's leader, or NATS being away are states that pass,
// and one host must not stop the provisioner's other hosts, GC or checks while they last.
// Each failed attempt is logged. Only what no retry can fix (a name NATS refuses, a
// connection its owner closed) is returned, with the host named. It returns a nil consumer
// and nil error when ctx ends first.
func (p *Provisioner) bindHost(ctx context.Context, host string) (jetstream.Consumer, error) {
	stream, name := events.OpsStream(p.cfg.Provider), events.HostConsumer(host)
	for attempt := 1; ; attempt++ {
		bctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
		cons, err := p.cfg.Buckets.JS.Consumer(bctx, stream, name)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				p.cfg.Log.Info("host consumer bound", "host", host, "attempts", attempt)
			}
			return cons, nil
		case ctx.Err() != nil:
			return nil, nil
		case permanent(err):
			return nil, fmt.Errorf("provisioner %s: bind consumer %s of host %s: %w", p.cfg.Provider, name, host, err)
		}
		wait := workers.Backoff(attempt, bindRetryBase, bindRetryMax)
		p.cfg.Log.Warn("host consumer not bound; retrying (is `egressd setup` done for this host?)",
			"host", host, "consumer", name, "attempt", attempt, "retryIn", wait, "err", err)
		sleep(ctx, wait)
	}
}

// permanent reports whether an error binding or fetching from a consumer is one no retry can
// fix.
func permanent(err error) bool {
	return errors.Is(err, jetstream.ErrInvalidStreamName) || errors.Is(err, jetstream.ErrInvalidConsumerName) ||
		errors.Is(err, nats.ErrConnectionClosed)
}
