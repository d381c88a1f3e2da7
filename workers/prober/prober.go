package prober

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
)

// Config of a prober.
type Config struct {
	Buckets Buckets    // BucketsOf(store)
	NC      *nats.Conn // core NATS, for probe-now requests
	Worker  string     // this process's identity, written into each record as its prober

	// Filters limit the proxies this prober takes, each "provider" or "provider.host"; empty
	// takes every proxy. A prober next to a private network serves only that network's proxies.
	Filters []string

	// DefaultCheckURL is fetched through a proxy whose spec names no healthCheck.url; normally
	// the URL of egressd's echo endpoint (ServeEcho). When it is an http URL it is also the
	// target of every probe's plain-HTTP path, whatever the spec's check URL: that path needs
	// an echo endpoint to see what the proxy adds.
	DefaultCheckURL string

	// Concurrency is the number of probes in flight at most (default 256). A prober keeps up
	// while concurrency / probe latency exceeds its share of proxies / interval.
	Concurrency int
	Log         *slog.Logger
	Now         func() time.Time // default time.Now
	Observer    Observer         // optional: counts probes and lag (metrics)

	// Heartbeat and MemberTTL time the prober's presence record (defaults 2 s and 6 s): a
	// prober that dies hands its proxies to the others within MemberTTL.
	Heartbeat, MemberTTL time.Duration

	// InsecureSkipVerify accepts any certificate of an https check URL. For tests only.
	InsecureSkipVerify bool

	// LeaseMaster signs the probes' own tokens for proxies whose auth.mode is "lease".
	LeaseMaster leaseauth.Source
}

// Observer counts what leaves no state behind (metrics). *metrics.Metrics implements it.
type Observer interface {
	ObserveProbe(ok bool, d time.Duration)
	// ObserveProbeDelay is how late a probe started against its schedule.
	ObserveProbeDelay(d time.Duration)
	// ObserveProberLoad is this prober's share, how many of it wait past their due time, and
	// how late the oldest of them is; sampled every second.
	ObserveProberLoad(owned, backlog int, lag time.Duration)
}

type noObserver struct{}

func (noObserver) ObserveProbe(bool, time.Duration)          {}
func (noObserver) ObserveProbeDelay(time.Duration)           {}
func (noObserver) ObserveProberLoad(int, int, time.Duration) {}

// DefaultConcurrency is the number of probes one prober runs at once unless told otherwise.
const DefaultConcurrency = 256

// Budgets of the calls around a probe (the probe itself has the spec's timeoutSeconds).
const (
	kvBudget    = 5 * time.Second
	flushBudget = 5 * time.Second
)

// Prober schedules and runs the probes of its share of the fleet and records health.
type Prober struct {
	cfg        Config
	log        *slog.Logger
	subjects   []string
	defaultURL *url.URL
	forwardURL *url.URL            // the plain-HTTP path's target: defaultURL when it is http, else nil
	member     events.ProberMember // this process's presence record
	sentinel   *sentinel           // whether the echo endpoint answers the prober directly

	ready      chan struct{}  // closed once the watches are in sync and probes start
	background sync.WaitGroup // event publishes; Run waits for them
}

// New checks the config; it does no I/O.
func New(cfg Config) (*Prober, error) {
	if !cfg.Buckets.complete() || cfg.NC == nil || cfg.Worker == "" {
		return nil, errors.New("prober: buckets, NATS connection and worker are required")
	}
	u, err := parseCheckURL(cfg.DefaultCheckURL)
	if err != nil {
		return nil, fmt.Errorf("prober: default check URL: %w", err)
	}
	subs, err := subjects(cfg.Filters)
	if err != nil {
		return nil, fmt.Errorf("prober: %w", err)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = defaultHeartbeat
	}
	if cfg.MemberTTL <= cfg.Heartbeat {
		cfg.MemberTTL = max(defaultMemberTTL, 3*cfg.Heartbeat)
	}
	id := make([]byte, 8)
	rand.Read(id)
	m := events.ProberMember{V: 1, ID: hex.EncodeToString(id), Worker: cfg.Worker, Filters: cfg.Filters,
		Concurrency: cfg.Concurrency, StartedAt: cfg.Now().UTC()}
	var forward *url.URL
	if u.Scheme == "http" {
		forward = u
	}
	p := &Prober{
		cfg:        cfg,
		forwardURL: forward,
		log:        cfg.Log.With("role", "prober", "worker", cfg.Worker, "member", m.ID),
		subjects:   subs,
		defaultURL: u,
		member:     m,
		ready:      make(chan struct{}),
	}
	// The plain-HTTP echo endpoint is the one every probe reaches; an https default has none
	// the prober serves, and then nothing is checked.
	p.sentinel = newSentinel(forward, p.probePathChanged)
	return p, nil
}

// Ready is closed once the prober has read the fleet and starts probing.
func (p *Prober) Ready() <-chan struct{} { return p.ready }

// parseCheckURL accepts an absolute http or https URL.
func parseCheckURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		// url.Parse's error would quote the URL, and with it any password in it.
		return nil, errors.New("must be an absolute http or https URL")
	}
	return u, nil
}

// Run probes this prober's share of the fleet until ctx ends: it watches the specs, statuses,
// health records and the other probers, schedules each owned proxy once per interval at its
// phase, and runs at most Concurrency probes at once. A probe that cannot start on time
// waits (it is never dropped) and shows as lag. On return every goroutine it started has
// finished (probes cut short by the end of ctx record nothing) and its presence is removed.
func (p *Prober) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watches live on gctx, the context the loop checks: when they close because it
	// ended, the loop knows that is why.
	g, gctx := errgroup.WithContext(ctx)
	l, err := p.newLoop(gctx)
	if err != nil {
		return err
	}
	defer l.stopWatches()

	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range p.subjects {
		s, err := p.cfg.NC.QueueSubscribe(subj, events.ProbeQueue, l.nudges.receive(p))
		if err != nil {
			return fmt.Errorf("prober: subscribe to %s: %w", subj, err)
		}
		subs = append(subs, s)
	}
	// Not fatal: the client re-sends the interest when it reconnects.
	fctx, fcancel := context.WithTimeout(ctx, flushBudget)
	if err := p.cfg.NC.FlushWithContext(fctx); err != nil && ctx.Err() == nil {
		p.log.Warn("flush of the probe subscriptions", "err", err)
	}
	fcancel()

	for range p.cfg.Concurrency {
		g.Go(func() error { p.work(gctx, l.jobs, l.done); return nil })
	}
	g.Go(func() error { return p.keepPresent(gctx, l.currentLoad) })
	g.Go(func() error { p.sentinel.watch(gctx); return nil })
	err = l.run(gctx)
	cancel()
	close(l.jobs)
	err = errors.Join(err, g.Wait())
	p.background.Wait()
	return err
}

// work runs the jobs the loop hands out until the loop closes jobs, reporting each back.
func (p *Prober) work(ctx context.Context, jobs <-chan job, done chan<- completion) {
	for j := range jobs {
		c := p.execute(ctx, j)
		select {
		case done <- c:
		case <-ctx.Done():
		}
	}
}
