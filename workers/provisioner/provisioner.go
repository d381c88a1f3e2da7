package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/tracing"
	"github.com/egressd/egressd/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// Config of one provisioner for one provider.
type Config struct {
	Provider     string // configured provider name
	Backend      providers.Provider
	Catalog      providers.Catalog
	Hosts        []string // hosts this process serves; empty means all of the catalog
	Installation string
	Worker       string  // this process's identity, for locks and results
	Buckets      Buckets // BucketsOf(store)
	Log          *slog.Logger
	Timings      Timings
	GC           GC
	Checks       Checks
	Observer     Observer                 // optional
	Leftovers    providers.LeftoverLister // optional: resources without an instance, for orphan GC
	Tracing      trace.TracerProvider     // optional: nil is the global provider (docs/tracing.md)
	// LeaseMaster derives the key delivered to a proxy whose auth.mode is "lease"; without it
	// such a create fails as permanent.
	LeaseMaster leaseauth.Source
	// Now is the clock quarantine is judged by; default time.Now.
	Now func() time.Time
}

// Observer counts what leaves no state behind (metrics).
type Observer interface {
	ObserveOp(provider, op, result string, d time.Duration)
	ObserveGC(provider string)
}

type noObserver struct{}

func (noObserver) ObserveOp(string, string, string, time.Duration) {}
func (noObserver) ObserveGC(string)                                {}

// Timings bound the provisioner's waits.
type Timings struct {
	LockTTL      time.Duration // op lock; renewed every LockTTL/3 while the call runs
	Heartbeat    time.Duration // InProgress to the server and lock renewal
	CreateBudget time.Duration // a whole Create
	CallBudget   time.Duration // Get, Delete, List
	LockBusyWait time.Duration // redelivery delay when another worker holds the op lock
	FetchWait    time.Duration
}

// DefaultTimings are the production values.
func DefaultTimings() Timings {
	return Timings{
		LockTTL:      30 * time.Second,
		Heartbeat:    kvstore.OpsAckWait / 3,
		CreateBudget: 15 * time.Minute,
		CallBudget:   2 * time.Minute,
		LockBusyWait: 2 * time.Second,
		FetchWait:    5 * time.Second,
	}
}

// Provisioner consumes one provider's ops.
type Provisioner struct {
	cfg      Config
	tracer   trace.Tracer
	attempts *attempts
}

// New checks the config; it does no I/O.
func New(cfg Config) (*Provisioner, error) {
	if cfg.Provider == "" || cfg.Backend == nil || !cfg.Buckets.complete() || cfg.Installation == "" {
		return nil, errors.New("provisioner: provider, backend, buckets and installation are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timings == (Timings{}) {
		cfg.Timings = DefaultTimings()
	}
	if len(cfg.Hosts) == 0 {
		for _, h := range cfg.Catalog.Hosts {
			cfg.Hosts = append(cfg.Hosts, h.Name)
		}
	}
	cfg.Log = cfg.Log.With("role", "provisioner", "provider", cfg.Provider)
	return &Provisioner{cfg: cfg, tracer: tracing.Tracer(cfg.Tracing), attempts: &attempts{js: cfg.Buckets.JS}}, nil
}

// CatalogRecord is provider's catalog as provider_catalog holds it.
func CatalogRecord(provider string, c providers.Catalog, at time.Time) events.CatalogRecord {
	rec := events.CatalogRecord{V: 1, Provider: provider, Type: c.Type, Images: c.Images, Limits: c.Limits,
		CredentialsInPlace: c.CredentialsInPlace, UpdatedAt: at}
	for _, h := range c.Hosts {
		rec.Hosts = append(rec.Hosts, events.CatalogHost{Name: h.Name, MaxConcurrentOps: h.MaxConcurrentOps})
	}
	for name, m := range c.MachineTypes {
		if rec.MachineTypes == nil {
			rec.MachineTypes = map[string]events.MachineType{}
		}
		rec.MachineTypes[name] = events.MachineType{VCPUs: m.VCPUs, MemoryMiB: m.MemoryMiB}
	}
	return rec
}

// Setup declares the provider's stream and host consumers, then publishes its catalog: what
// the all-in-one does. Against a shared NATS only the admin declares (`egressd setup`) and a
// provisioner calls PublishCatalog alone.
func (p *Provisioner) Setup(ctx context.Context, o kvstore.Options) error {
	if err := kvstore.EnsureOps(ctx, p.cfg.Buckets.JS, p.cfg.Provider, HostConfigs(p.cfg.Catalog), o); err != nil {
		return err
	}
	return p.PublishCatalog(ctx)
}

// HostConfigs are a catalog's hosts with their op limits, as EnsureOps takes them.
func HostConfigs(c providers.Catalog) []kvstore.HostConfig {
	var hosts []kvstore.HostConfig
	for _, h := range c.Hosts {
		hosts = append(hosts, kvstore.HostConfig{Name: h.Name, MaxConcurrentOps: h.MaxConcurrentOps})
	}
	return hosts
}

// PublishCatalog writes the provider's catalog (never secrets) to provider_catalog.
func (p *Provisioner) PublishCatalog(ctx context.Context) error {
	rec := CatalogRecord(p.cfg.Provider, p.cfg.Catalog, time.Now().UTC())
	if _, err := kvstore.PutJSON(ctx, p.cfg.Buckets.Catalog, p.cfg.Provider, rec); err != nil {
		return fmt.Errorf("publish catalog of %s: %w", p.cfg.Provider, err)
	}
	return nil
}

// Run pulls ops until ctx ends or a part of it fails for good, and returns when every
// goroutine it started has. Each host is served on its own (hosts.go): a host whose consumer
// cannot be bound yet is retried with backoff while the other hosts, GC and checks run; an
// error no retry can fix cancels every part, and Run returns it with the host named.
func (p *Provisioner) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, host := range p.cfg.Hosts {
		g.Go(func() error { return p.serveHost(gctx, host) })
	}
	g.Go(func() error { p.gcLoop(gctx); return nil })
	g.Go(func() error { p.checkLoop(gctx); return nil })
	p.cfg.Log.Info("provisioner started", "hosts", p.cfg.Hosts)
	return g.Wait()
}

// fetchLoop runs the host's ops one at a time until ctx ends. Fetch errors are logged and
// retried (a consumer being re-declared, a cluster electing its leader); only a permanent one
// ends it, with the host named.
func (p *Provisioner) fetchLoop(ctx context.Context, cons jetstream.Consumer, host string) error {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.FetchWait)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if permanent(err) {
				return fmt.Errorf("provisioner %s: fetch ops of host %s: %w", p.cfg.Provider, host, err)
			}
			if ctx.Err() == nil {
				p.cfg.Log.Warn("fetch", "host", host, "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for m := range batch.Messages() {
			p.handle(ctx, m)
		}
		cancel()
	}
	return nil
}

// handle runs one delivery of an op.
func (p *Provisioner) handle(ctx context.Context, m jetstream.Msg) {
	ctx, span := p.startProcess(ctx, m)
	defer span.End()
	var op events.Op
	if err := json.Unmarshal(m.Data(), &op); err != nil || op.V != 1 || op.Proxy == "" || op.ID == "" {
		p.cfg.Log.Error("dropping malformed op", "subject", m.Subject(), "err", err)
		tracing.Fail(span, "Malformed")
		_ = m.TermWithReason("malformed op")
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Nak()
		return
	}
	delivered := int(meta.NumDelivered)
	span.SetAttributes(opAttrs(op)...)
	log := p.cfg.Log.With("proxy", op.Proxy, "op", op.Kind, "opId", op.ID, "delivery", delivered)

	lock, err := kvstore.AcquireLock(ctx, p.cfg.Buckets.JS, p.cfg.Buckets.Locks, events.OpLockKey(op.Proxy), p.cfg.Worker, string(op.Kind), p.cfg.Timings.LockTTL)
	if err != nil {
		// Another worker runs an op on this proxy (a redelivery racing a slow worker).
		log.Debug("op lock busy", "err", err)
		_ = m.NakWithDelay(p.cfg.Timings.LockBusyWait)
		return
	}
	// Counted under the lock: only deliveries that run the op spend attempts.
	attempt := p.attemptOf(ctx, op, delivered)
	log = log.With("attempt", attempt)
	span.SetAttributes(tracing.OpAttempt.Int(attempt))
	started := time.Now().UTC()
	res, lost := p.runLocked(ctx, m, lock, op)
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = lock.Release(relCtx)
	if lost || ctx.Err() != nil {
		// Shutdown or a lost lock: someone else may run the op now, so report nothing and
		// let the server redeliver it.
		log.Info("op abandoned", "lockLost", lost)
		tracing.Fail(span, "Abandoned")
		_ = m.Nak()
		return
	}
	s := workers.Settle(res.ErrorClass, attempt, kvstore.OpsMaxAttempts)
	res.V, res.OpID, res.Kind, res.Proxy, res.Provider, res.Host = 1, op.ID, op.Kind, op.Proxy, p.cfg.Provider, op.Host
	res.Attempt, res.Final, res.Worker, res.StartedAt, res.At = attempt, s.Final, p.cfg.Worker, started, time.Now().UTC()
	tracing.Fail(span, res.ErrorClass)
	if err := p.publishResult(relCtx, res); err != nil {
		log.Error("publish result", "err", err)
		_ = m.Nak()
		return
	}
	p.cfg.Observer.ObserveOp(p.cfg.Provider, string(op.Kind), metricResult(op.Kind, res.ErrorClass), res.At.Sub(started))
	log.Info("op done", "class", res.ErrorClass, "settle", s.Action.String(), "took", res.At.Sub(started).Round(time.Millisecond))
	switch s.Action {
	case workers.Ack:
		_ = m.DoubleAck(relCtx)
	case workers.NakDelay:
		_ = m.NakWithDelay(s.Delay)
	case workers.Term:
		_ = m.TermWithReason(string(res.ErrorClass))
	}
}

// runLocked runs the op while heartbeating the message and renewing the lock; if a renewal
// fails the call is cancelled and lost is true.
func (p *Provisioner) runLocked(ctx context.Context, m jetstream.Msg, lock *kvstore.Lock, op events.Op) (res events.OpResult, lost bool) {
	opCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup // lost is read only after wg.Wait
	wg.Go(func() {
		if err := lock.KeepRenewed(opCtx, p.cfg.Timings.Heartbeat, func() { _ = m.InProgress() }); err != nil {
			lost = true
			cancel()
		}
	})
	res = p.call(opCtx, op)
	cancel()
	wg.Wait()
	return res, lost
}

func (p *Provisioner) publishResult(ctx context.Context, res events.OpResult) error {
	ev := events.Event{V: 1, ID: fmt.Sprintf("%s:%s:%d", res.Proxy, res.OpID, res.Attempt), Kind: events.KindOpResult,
		Proxy: res.Proxy, At: res.At, Op: &res, Reason: events.Reason(res.ErrorClass)}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	subject := events.EventSubject(events.KindOpResult, res.Proxy)
	span, h := p.startPublishResult(ctx, subject, ev.ID)
	defer span.End()
	_, err = p.cfg.Buckets.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: b, Header: nats.Header(h)}, jetstream.WithMsgID(ev.ID))
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// metricResult is the result label of an op: a delete that reads back NotFound succeeded.
func metricResult(kind events.OpKind, class events.ErrorClass) string {
	if kind == events.OpDelete && class == events.ClassNotFound {
		return ""
	}
	return string(class)
}
