package leaser

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// watch is a bucket the leaser follows, the keys it needs of it (every key when empty), and
// what folds each entry.
type watch struct {
	kv    jetstream.KeyValue
	apply func(jetstream.KeyValueEntry)
	keys  []string
}

// watches are the buckets the view is built from. Every entry may free a slot for a waiting
// acquire (or move the queue): each wakes them.
func (l *Leaser) watches(ctx context.Context) []watch {
	st := l.cfg.Buckets
	ws := []watch{
		{st.Proxies, l.waking(l.view.applySpec), nil},
		{st.Status, l.waking(l.resolvingAuth(ctx, l.view.applyStatus)), nil},
		{st.Health, l.waking(l.view.applyHealth), nil},
		{st.Cooldowns, l.waking(l.view.applyCooldown), nil},
		{st.Pools, l.waking(l.applyPool), nil},
		// Not its revoked.> keys: those are for the proxies (revoke.go), and every release
		// writes one.
		{st.LeaseState, l.waking(l.view.applyState), []string{"holder.>", "session.>", waitPrefix + ">", waitingPrefix + ">"}},
	}
	for i, kv := range st.Leases.All() {
		ws = append(ws, watch{kv, l.waking(l.echoing(i, l.applyLease)), nil})
	}
	return ws
}

// Run fills the view from the watches, serves the lease endpoints once every watch has
// delivered its initial values, and on ctx's end stops the service, lets the requests in
// flight finish (within ShutdownBudget) and returns when every goroutine it started has.
// Call it once.
func (l *Leaser) Run(ctx context.Context) error {
	watchCtx, stopWatches := context.WithCancel(context.WithoutCancel(ctx))
	if l.cfg.HTTP != nil {
		defer l.cfg.HTTP.Listener.Close() // also when Run returns before serving on it
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWatches()

	watches := l.watches(watchCtx)
	ready := make(chan struct{}, len(watches))
	failed := make(chan error, len(watches))
	for _, w := range watches {
		kw, err := kvstore.WatchKeys(watchCtx, w.kv, w.keys)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := kw.Follow(watchCtx, w.apply, func() { ready <- struct{}{} }); err != nil {
				failed <- err
			}
		})
	}
	wg.Go(func() { l.emitter.run(watchCtx) })
	wg.Go(func() { l.shards.watch(watchCtx) })
	wg.Go(func() { l.resyncStale(watchCtx) })
	wg.Go(func() { l.stats.run(watchCtx, l.cfg.RequestBudget) })
	dw := &demandWriter{book: l.demand, js: l.cfg.Buckets.JS, kv: l.cfg.Buckets.PoolDemand, log: l.log, member: l.stats.member,
		interval: l.cfg.DemandInterval, held: l.view.fleet.Held}
	wg.Go(func() { dw.run(watchCtx, l.cfg.RequestBudget) })
	wg.Go(func() { l.sweep(watchCtx) })
	wg.Go(func() { l.heartbeat(watchCtx) })

	for range watches {
		select {
		case <-ready:
		case err := <-failed:
			return err
		case <-ctx.Done():
			return nil
		}
	}

	l.view.startSweeping()
	l.gate = newGate(maxConcurrent)
	defer l.gate.close() // on every way out; after stop it has nothing left to wait for
	svc, err := l.serve(watchCtx)
	if err != nil {
		return err
	}
	// Ready means "a request now reaches us": the subscriptions must be at the server.
	if err := l.cfg.NC.FlushTimeout(l.cfg.RequestBudget); err != nil {
		l.stop(svc)
		return fmt.Errorf("flush subscriptions: %w", err)
	}
	l.log.Info("lease service started", "subjects", events.LeaseSubjectPrefix+".*")
	stopHTTP := l.startHTTP(watchCtx, &wg, failed)
	close(l.ready)
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	close(l.quit) // waiting acquires answer now, before the faces stop
	stopHTTP()
	l.stop(svc)
	l.gate.close()
	l.waiters.Wait()
	return err
}

// applyPool folds an entry of pools into the view (holder caps) and the demand book (which
// pools a selector can match).
func (l *Leaser) applyPool(e jetstream.KeyValueEntry) {
	l.view.applyPool(e)
	var spec *schemas.PoolSpec
	if isPut(e) {
		if s, err := schemas.ParsePoolSpec(e.Value()); err == nil {
			spec = &s
		}
	}
	l.demand.setPool(e.Key(), spec)
}

// applyLease folds a proxy_leases entry and publishes the expiry of a held slot. Every
// replica sees the expiry marker and publishes; the message ID is the slot key and the
// lease's last revision, so the stream keeps one event however many replicas there are.
//
// The statistics count the expiry once, on the replica that wrote the slot last; every
// entry also tells them that whoever wrote before it no longer owns the slot.
func (l *Leaser) applyLease(e jetstream.KeyValueEntry) {
	old := l.view.applyLease(e)
	if old != nil {
		lease := old.lease
		l.stats.expired(l.view.originOf(lease.Proxy).inTier(lease.Tier), lease.Proxy, lease.Target, e.Key(), old.rev)
	}
	l.stats.forget(e.Key(), e.Revision())
	if old == nil || !l.cfg.RawEvents.Publishes(events.ReasonExpired) {
		return
	}
	l.emitter.emit(events.Event{ID: fmt.Sprintf("expired:%s:%d", e.Key(), old.rev), Kind: events.KindLease,
		Proxy: old.lease.Proxy, At: l.now(), Reason: events.ReasonExpired, Lease: leaseEvent(old.lease, events.ReasonExpired)})
}

// serve registers the service; every replica joins the endpoints' default queue group, so
// each request goes to exactly one of them.
func (l *Leaser) serve(ctx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(l.cfg.NC, micro.Config{
		Name:        events.LeaseService,
		Version:     ServiceVersion,
		Description: "leases of egress proxies (docs/leases.md)",
		Metadata:    map[string]string{"worker": l.cfg.Worker},
	})
	if err != nil {
		return nil, fmt.Errorf("add service %s: %w", events.LeaseService, err)
	}
	g := svc.AddGroup(events.LeaseSubjectPrefix)
	handlers := map[string]micro.Handler{"acquire": l.acquireHandler(ctx)}
	for name, h := range map[string]func(context.Context, []byte) (any, error){
		"renew": l.renew, "release": l.release, "report": l.report,
	} {
		handlers[name] = l.handler(ctx, name, h)
	}
	for name, h := range handlers {
		if err := g.AddEndpoint(name, l.concurrently(h)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("add endpoint %s: %w", name, err)
		}
	}
	return svc, nil
}

// handler runs h with the request budget and answers with its reply or its error.
func (l *Leaser) handler(ctx context.Context, name string, h func(context.Context, []byte) (any, error)) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		l.inflight.Add(1)
		defer l.inflight.Add(-1)
		rctx, end := l.startCall(ctx, name, req.Headers())
		reply, err := h(rctx, req.Data())
		defer end(err, 0) // after the reply
		if err != nil {
			l.replyError(req, name, err)
			return
		}
		if err := req.RespondJSON(reply); err != nil {
			l.log.Warn("reply", "endpoint", name, "err", err)
		}
	})
}

// startCall gives one request, over NATS or HTTP, its budget and its span; end records its
// outcome (metrics, span) and releases both. waited is how long an acquire waited for a slot:
// the request's duration leaves it out (egress_lease_wait_seconds has it), so that waits do
// not drown the time to answer.
func (l *Leaser) startCall(ctx context.Context, name string, headers map[string][]string) (context.Context, func(err error, waited time.Duration)) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
	rctx, span := l.startRequest(rctx, name, headers)
	return rctx, func(err error, waited time.Duration) {
		res := result(name, err)
		l.cfg.Observer.ObserveLease(name, res, max(time.Since(start)-waited, 0))
		requestResult(span, res)
		span.End()
		cancel()
	}
}

// stop unsubscribes (new requests go to the other replicas) and waits, within ShutdownBudget,
// until the requests already delivered here are answered: Stop drains, so they still run.
func (l *Leaser) stop(svc micro.Service) {
	if err := svc.Stop(); err != nil {
		l.log.Warn("stop service", "err", err)
	}
	deadline := time.Now().Add(l.cfg.ShutdownBudget)
	quiet := 0
	for quiet < 5 && time.Now().Before(deadline) {
		// A drained message starts right after the one before it: idle several polls in a row.
		if l.inflight.Load() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.log.Info("lease service stopped")
}
