package reconciler

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/tracing"
	"github.com/egressd/egressd/workers"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Config of the reconciler.
type Config struct {
	Buckets      Buckets // BucketsOf(store)
	Installation string
	Holder       string // this process's identity in the leader lock
	Policy       Policy
	LeaderTTL    time.Duration
	Tick         time.Duration // how often due proxies are looked at
	// LeaseSpreadInterval is how often the leader spreads the lease shards' stream leaders
	// over the servers (spread.go); 0 is DefaultLeaseSpreadInterval, negative never.
	LeaseSpreadInterval time.Duration
	// MaxInstances bounds the instances of every provider together, beside each provider's
	// own limits (limits.maxInstances in the config file); 0: no such limit.
	MaxInstances int
	// Brake is the fleet-wide brake (brake.go); zero fields take the defaults.
	Brake Brake
	// ReplaceUnhealthyAfter overrides the policy's (0: keep it; negative: never replace).
	ReplaceUnhealthyAfter time.Duration
	Log                   *slog.Logger
	Tracing               trace.TracerProvider // optional: nil is the global provider (docs/tracing.md)
	// Boots hears each proxy's boot once its status saying so is stored (boots.go); optional.
	Boots BootObserver
}

// Reconciler decides for every proxy while it holds the leader lease.
type Reconciler struct {
	cfg    Config
	tracer trace.Tracer
}

// New checks the config; it does no I/O.
func New(cfg Config) (*Reconciler, error) {
	if !cfg.Buckets.complete() || cfg.Installation == "" || cfg.Holder == "" {
		return nil, errors.New("reconciler: buckets, installation and holder are required")
	}
	if cfg.Policy == (Policy{}) {
		cfg.Policy = DefaultPolicy()
	}
	switch d := cfg.ReplaceUnhealthyAfter; {
	case d < 0:
		cfg.Policy.ReplaceUnhealthyAfter = 0
	case d > 0:
		cfg.Policy.ReplaceUnhealthyAfter = d
	}
	cfg.Brake.Share = cmp.Or(cfg.Brake.Share, DefaultBrakeShare)
	cfg.Brake.Minimum = cmp.Or(cfg.Brake.Minimum, DefaultBrakeMinimum)
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = 10 * time.Second
	}
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	if cfg.LeaseSpreadInterval == 0 {
		cfg.LeaseSpreadInterval = DefaultLeaseSpreadInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Log = cfg.Log.With("role", "reconciler")
	return &Reconciler{cfg: cfg, tracer: tracing.Tracer(cfg.Tracing)}, nil
}

// Run blocks until ctx ends, reconciling whenever this process is the leader.
func (r *Reconciler) Run(ctx context.Context) error {
	l := &workers.Leader{JS: r.cfg.Buckets.JS, Locks: r.cfg.Buckets.Locks, Key: events.LockLeaderReconciler,
		Holder: r.cfg.Holder, TTL: r.cfg.LeaderTTL, Log: r.cfg.Log}
	return l.Run(ctx, r.lead)
}

type specEntry struct {
	raw  []byte
	rev  uint64
	spec *schemas.ProxySpec // parsed once per revision; nil when invalid
	err  error
}

type statusEntry struct {
	st  events.ProxyStatus
	rev uint64
}

type healthEntry struct {
	h   events.ProxyHealth
	rev uint64
}

// loop is the leader's state: what the watches delivered and what it wrote.
type loop struct {
	r           *Reconciler
	log         *slog.Logger
	tracer      trace.Tracer
	specs       map[string]specEntry
	statuses    map[string]statusEntry
	cloudInit   map[string][]byte
	catalog     map[string]ProviderInfo
	targets     map[string]map[string]TargetCheck // provider → target → its latest check
	limits      map[string]*createLimit           // provider → its create-rate limit, if any
	caps        map[string]*instanceCap           // provider → its instance limits, if any
	tally       *tally                            // the instances that may exist, for the limits
	brakes      *brakeTally                       // the Unhealthy share of each target and pool
	rollouts    *rolloutTally                     // the places each rollout budget has taken
	paused      events.RolloutPause               // the rollout scopes paused, read on the tick
	health      map[string]healthEntry
	due         map[string]time.Time
	unpublished map[string]events.Op // ops whose publish failed, retried on the tick
	events      *kvstore.Publisher
	backlog     []string        // proxies to decide that did not fit in a batch, in order
	queued      map[string]bool // the names in backlog
	carry       jetstream.Msg   // an op result that waits for the next batch
}

// consumerName is the durable the leader folds op results from; a new leader resumes it.
const consumerName = "reconciler"

func (r *Reconciler) lead(ctx context.Context) error {
	s := r.cfg.Buckets
	l := &loop{r: r, log: r.cfg.Log, tracer: r.tracer, specs: map[string]specEntry{}, statuses: map[string]statusEntry{},
		cloudInit: map[string][]byte{}, catalog: map[string]ProviderInfo{}, targets: map[string]map[string]TargetCheck{}, limits: map[string]*createLimit{}, caps: map[string]*instanceCap{}, tally: newTally(), brakes: newBrakeTally(r.cfg.Brake), rollouts: newRolloutTally(), due: map[string]time.Time{},
		health: map[string]healthEntry{}, unpublished: map[string]events.Op{}, queued: map[string]bool{},
		events: kvstore.NewPublisher(s.JS, r.cfg.Log, maxPendingEvents)}
	if err := l.loadStatuses(ctx); err != nil {
		return err
	}
	l.brakes.takeFlips() // a Suspect group found at start is no news; its proxies are decided below

	// The catalog and the cloud-init documents first, so that the specs are judged with them.
	var watches [5]*kvstore.Watch
	for i, w := range []struct {
		kv    jetstream.KeyValue
		apply func(jetstream.KeyValueEntry) []string
	}{{s.Catalog, l.applyCatalog}, {s.Providers, l.applyTarget}, {s.CloudInit, l.applyCloudInit}, {s.Proxies, l.applySpec}, {s.Health, l.applyHealth}} {
		kw, err := kvstore.WatchBucket(ctx, w.kv)
		if err != nil {
			return err
		}
		defer func() { _ = kw.Stop() }()
		if err := kw.SyncInitial(ctx, func(e jetstream.KeyValueEntry) { w.apply(e) }); err != nil {
			return err
		}
		watches[i] = kw
	}
	catW, targetW, ciW, specW, healthW := watches[0], watches[1], watches[2], watches[3], watches[4]

	results := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { l.events.Run(cctx) })
	if every := r.cfg.LeaseSpreadInterval; every > 0 && s.Leases.Len() > 1 {
		wg.Go(func() { l.spreadLeaseLeaders(cctx, every) })
	}
	defer l.events.Close() // runs first: the loop publishes no more events
	resultsEnded, err := l.consumeResults(cctx, &wg, results)
	if err != nil {
		return err
	}
	l.republishInFlight(ctx)
	l.enqueue(slices.Sorted(maps.Keys(l.names())))
	l.log.Info("reconciler leading", "proxies", len(l.specs), "statuses", len(l.statuses))

	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	src := sources{spec: specW, cloudInit: ciW, catalog: catW, health: healthW, targets: targetW, results: results,
		resultsEnded: resultsEnded, tick: tick.C}
	for {
		b, err := l.gather(ctx, src)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		l.run(ctx, b)
	}
}

// sources is what the leader waits on.
type sources struct {
	spec, cloudInit, catalog, health, targets *kvstore.Watch
	results                                   <-chan jetstream.Msg
	resultsEnded                              <-chan error // the results consumer ended for good
	tick                                      <-chan time.Time
}

// gather waits for work unless some is left over, then takes whatever else is already
// buffered, up to a full batch: under load the leader decides and writes many proxies per
// round trip; when idle a single change is handled at once.
func (l *loop) gather(ctx context.Context, src sources) (*batch, error) {
	b := newBatch()
	if m := l.carry; m != nil {
		l.carry = nil
		l.takeResult(b, m)
	}
	// Fresh work first, up to a quarter of the batch, then the backlog: a long backlog (a
	// leader's start, a catalog change naming every proxy) must not starve ticks, op results
	// (redelivered after their AckWait) or the watches for dozens of passes.
	for range maxBatch / 4 {
		if b.full() || l.carry != nil {
			break
		}
		got := poll(src)
		if got.none {
			break
		}
		if err := l.take(ctx, b, got); err != nil {
			return nil, err
		}
	}
	l.takeBacklog(b)
	for !b.full() && l.carry == nil {
		var got received
		if len(b.names) == 0 {
			got = wait(ctx, src)
		} else if got = poll(src); got.none {
			break
		}
		if err := l.take(ctx, b, got); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// received is one thing a source delivered.
type received struct {
	none   bool // poll: nothing buffered
	done   bool // ctx ended
	from   *kvstore.Watch
	entry  jetstream.KeyValueEntry
	closed bool
	msg    jetstream.Msg
	tick   bool
	err    error // a source ended for good
}

func wait(ctx context.Context, src sources) received {
	select {
	case <-ctx.Done():
		return received{done: true}
	case e, ok := <-src.spec.Updates():
		return received{from: src.spec, entry: e, closed: !ok}
	case e, ok := <-src.cloudInit.Updates():
		return received{from: src.cloudInit, entry: e, closed: !ok}
	case e, ok := <-src.catalog.Updates():
		return received{from: src.catalog, entry: e, closed: !ok}
	case e, ok := <-src.health.Updates():
		return received{from: src.health, entry: e, closed: !ok}
	case e, ok := <-src.targets.Updates():
		return received{from: src.targets, entry: e, closed: !ok}
	case m := <-src.results:
		return received{msg: m}
	case err := <-src.resultsEnded:
		return received{err: err}
	case <-src.tick:
		return received{tick: true}
	}
}

func poll(src sources) received {
	select {
	case e, ok := <-src.spec.Updates():
		return received{from: src.spec, entry: e, closed: !ok}
	case e, ok := <-src.cloudInit.Updates():
		return received{from: src.cloudInit, entry: e, closed: !ok}
	case e, ok := <-src.catalog.Updates():
		return received{from: src.catalog, entry: e, closed: !ok}
	case e, ok := <-src.health.Updates():
		return received{from: src.health, entry: e, closed: !ok}
	case e, ok := <-src.targets.Updates():
		return received{from: src.targets, entry: e, closed: !ok}
	case m := <-src.results:
		return received{msg: m}
	case err := <-src.resultsEnded:
		return received{err: err}
	case <-src.tick:
		return received{tick: true}
	default:
		return received{none: true}
	}
}

// take applies what was received to the leader's view and adds the proxies it affects.
func (l *loop) take(ctx context.Context, b *batch, got received) error {
	switch {
	case got.done:
		return ctx.Err()
	case got.closed:
		_, err := got.from.Take(nil, false)
		return err
	case got.err != nil:
		return got.err
	case got.tick:
		l.tick(ctx, b)
	case got.msg != nil:
		l.takeResult(b, got.msg)
	default:
		var affected []string
		switch got.from.Bucket() {
		case events.BucketProxies:
			affected = l.applySpec(got.entry)
		case events.BucketCloudInit:
			affected = l.applyCloudInit(got.entry)
		case events.BucketCatalog:
			affected = l.applyCatalog(got.entry)
		case events.BucketHealth:
			affected = l.applyHealth(got.entry)
		case events.BucketProviderHealth:
			affected = l.applyTarget(got.entry)
		}
		l.enqueue(affected)
		l.takeBacklog(b)
	}
	return nil
}

// enqueue queues proxies to decide; the batch takes them from the front.
func (l *loop) enqueue(names []string) {
	for _, n := range names {
		if !l.queued[n] {
			l.queued[n] = true
			l.backlog = append(l.backlog, n)
		}
	}
}

func (l *loop) takeBacklog(b *batch) {
	k := 0
	for k < len(l.backlog) && b.add(l.backlog[k]) {
		delete(l.queued, l.backlog[k])
		k++
	}
	l.backlog = l.backlog[k:]
	if len(l.backlog) == 0 {
		l.backlog = nil // let a long one's array go
	}
}

// consumeResults starts the goroutines that feed op results to out. When the results
// consumer ends for good (deleted with its stream or by hand, or the connection closed), the
// returned channel carries why: the leader then steps down with that error and the next
// leadership (this process's or a standby's) declares the consumer again, so the system keeps
// converging instead of leading on without results.
func (l *loop) consumeResults(ctx context.Context, wg *sync.WaitGroup, out chan<- jetstream.Msg) (<-chan error, error) {
	js := l.r.cfg.Buckets.JS
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamEvents, jetstream.ConsumerConfig{
		Durable:       consumerName,
		Description:   "op results folded into status by the leading reconciler",
		FilterSubject: events.OpResultSubjects,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("results consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return nil, fmt.Errorf("results consumer: %w", err)
	}
	wg.Go(func() {
		<-ctx.Done()
		it.Stop()
	})
	ended := make(chan error, 1)
	wg.Go(func() {
		var cause error // a terminal error comes first; the iterator is closed after it
		for {
			m, err := it.Next()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				if cause != nil {
					err = fmt.Errorf("%w (%w)", cause, err)
				}
				ended <- fmt.Errorf("results consumer ended: %w", err)
				return
			}
			if err != nil {
				cause = err
				continue
			}
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	})
	return ended, nil
}

// republishInFlight publishes again the ops a previous leader recorded as in flight, in case
// it died between writing the status and publishing; within the stream's duplicate window an
// op that did get out is dropped, and running one twice is harmless (ops are idempotent).
func (l *loop) republishInFlight(ctx context.Context) {
	for name, e := range l.statuses {
		if e.st.Op != nil && time.Since(e.st.Op.IssuedAt) < 2*time.Minute {
			l.publishOp(ctx, OpFor(name, e.st))
		}
	}
}

// takeResult adds an op result to fold, or keeps it for the next batch when this one
// already folds one for the same proxy or is full.
func (l *loop) takeResult(b *batch, m jetstream.Msg) {
	var ev events.Event
	if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.Op == nil || ev.Op.Proxy == "" {
		l.log.Warn("ignoring unreadable op result", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	if !b.addResult(ev.Op.Proxy, ev.Op, m) {
		l.carry = m
	}
}

// tick publishes again the ops whose publish failed and adds the proxies that are due.
func (l *loop) tick(ctx context.Context, b *batch) {
	for name, op := range l.unpublished {
		delete(l.unpublished, name)
		l.publishOp(ctx, op)
	}
	l.refreshPause(ctx)
	now := time.Now()
	for name, t := range l.due {
		if !now.Before(t) && b.add(name) {
			delete(l.due, name)
		}
	}
}

// newID is a random 20-character lowercase base32 ID.
func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))[:20]
}
