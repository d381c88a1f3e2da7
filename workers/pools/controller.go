package pools

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Config of the pool controller.
type Config struct {
	Buckets   Buckets       // BucketsOf(store)
	Holder    string        // this process's identity in the leader lock
	LeaderTTL time.Duration // default 10s
	// Resync is how often every pool is looked at even without a change: ages, drains and
	// block windows move with the clock. Default 2s.
	Resync time.Duration
	Log    *slog.Logger
	Now    func() time.Time
}

// Controller keeps the pools while it holds the leader lease.
type Controller struct {
	cfg Config
}

// New checks the config; it does no I/O.
func New(cfg Config) (*Controller, error) {
	if !cfg.Buckets.complete() || cfg.Holder == "" {
		return nil, errors.New("pools: buckets and holder are required")
	}
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = 10 * time.Second
	}
	if cfg.Resync == 0 {
		cfg.Resync = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Log = cfg.Log.With("role", "pools")
	return &Controller{cfg: cfg}, nil
}

// Run blocks until ctx ends, keeping the pools whenever this process is the leader.
func (c *Controller) Run(ctx context.Context) error {
	l := &workers.Leader{JS: c.cfg.Buckets.JS, Locks: c.cfg.Buckets.Locks, Key: events.LockLeaderPools,
		Holder: c.cfg.Holder, TTL: c.cfg.LeaderTTL, Log: c.cfg.Log}
	return l.Run(ctx, c.lead)
}

// Budgets of one pass.
const (
	readBudget  = 5 * time.Second
	writeBudget = 5 * time.Second // one KV write
	// maxPendingEvents bounds the events whose acks are outstanding (kvstore.Publisher).
	maxPendingEvents = 256
)

// lead keeps the pools until ctx ends (the lease is lost) or a watch fails.
func (c *Controller) lead(ctx context.Context) error {
	v := newView()
	b := newBlocks()
	s := c.cfg.Buckets
	g, gctx := errgroup.WithContext(ctx)
	watches := []struct {
		kv    jetstream.KeyValue
		apply func(jetstream.KeyValueEntry)
	}{{s.Pools, v.applyPool}, {s.PoolStatus, v.applyLedger}, {s.Proxies, v.applyProxy}, {s.Status, v.applyStatus}, {s.Catalog, v.applyCatalog}, {s.PoolDemand, v.applyDemand}}
	synced := make(chan struct{}, len(watches))
	for _, w := range watches {
		g.Go(func() error {
			kw, err := kvstore.WatchBucket(gctx, w.kv)
			if err != nil {
				return err
			}
			// A watch that ends is an error: the leader steps down and a new one starts clean.
			return kw.Follow(gctx, w.apply, func() { synced <- struct{}{} })
		})
	}
	g.Go(func() error {
		for range watches {
			select {
			case <-synced:
			case <-gctx.Done():
				return nil
			}
		}
		window := v.window()
		g.Go(func() error { return b.follow(gctx, s.JS, c.cfg.Now().Add(-window)) })
		pub := kvstore.NewPublisher(s.JS, c.cfg.Log, maxPendingEvents)
		g.Go(func() error { pub.Run(gctx); return nil })
		defer pub.Close() // the loop publishes no more
		c.cfg.Log.Info("pool controller leading", "pools", len(v.names()))
		return c.loop(gctx, v, b, pub, window)
	})
	return g.Wait()
}

// loop runs a pass for every pool that changed, and for all of them every Resync.
func (c *Controller) loop(ctx context.Context, v *view, b *blocks, pub *kvstore.Publisher, window time.Duration) error {
	tick := time.NewTicker(c.cfg.Resync)
	defer tick.Stop()
	pass := func(names []string) {
		for _, name := range names {
			if ctx.Err() != nil {
				return
			}
			// A failed pass (a write conflict, NATS away) is tried again at the next resync.
			if err := c.pass(ctx, v, b, pub, name); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("pool pass", "pool", name, "err", err)
			}
		}
	}
	pass(v.names())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-v.wake:
			pass(v.takeDirty())
		case <-tick.C:
			// The window of the pools now (a pool may have been given a longer one); reports
			// older than the replay at takeover were never read, see view.window.
			b.prune(c.cfg.Now().Add(-max(window, v.window())), func(p string) bool { return v.taken(p) })
			pass(v.names())
		}
	}
}
