package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go"
)

// Config of a prober.
type Config struct {
	Store  *kvstore.Store
	NC     *nats.Conn // core NATS, for the queue subscription
	Worker string     // this process's identity, written into each record as its prober

	// Filters limit the probes this prober takes, each "provider" or "provider.host"; empty
	// takes every probe. A prober next to a private network serves only that network's proxies.
	Filters []string

	// DefaultCheckURL is fetched through a proxy whose spec names no healthCheck.url; normally
	// the URL of egressd's echo endpoint (ServeEcho).
	DefaultCheckURL string

	Concurrency int // probes in flight at most; default 64
	Log         *slog.Logger
	Now         func() time.Time // default time.Now
	Observer    Observer         // optional: counts probes (metrics)

	// InsecureSkipVerify accepts any certificate of an https check URL. For tests only.
	InsecureSkipVerify bool
}

// Observer counts what leaves no state behind (metrics). *metrics.Metrics implements it.
type Observer interface {
	ObserveProbe(ok bool, d time.Duration)
}

type noObserver struct{}

func (noObserver) ObserveProbe(bool, time.Duration) {}

// DefaultConcurrency is the number of probes one prober runs at once unless told otherwise.
const DefaultConcurrency = 64

// Budgets of the calls around a probe (the probe itself has the spec's timeoutSeconds).
const (
	kvBudget    = 5 * time.Second
	flushBudget = 5 * time.Second
)

// backlog is how many requests wait for a free worker. Beyond it NATS drops requests (a slow
// consumer), which is the right thing: the scheduler sends a fresh one every interval.
const backlog = 1024

// staleSlack is added to a proxy's interval before a waiting request counts as stale: it
// covers clock skew between the scheduler and this prober.
const staleSlack = 5 * time.Second

// Prober takes probe requests and records health.
type Prober struct {
	cfg        Config
	log        *slog.Logger
	subjects   []string
	defaultURL *url.URL

	mu       sync.Mutex
	inFlight map[string]bool // proxies being probed here, so a burst of requests probes once
}

// New checks the config; it does no I/O.
func New(cfg Config) (*Prober, error) {
	if cfg.Store == nil || cfg.NC == nil || cfg.Worker == "" {
		return nil, errors.New("prober: store, NATS connection and worker are required")
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
	return &Prober{
		cfg:        cfg,
		log:        cfg.Log.With("role", "prober", "worker", cfg.Worker),
		subjects:   subs,
		defaultURL: u,
		inFlight:   map[string]bool{},
	}, nil
}

// parseCheckURL accepts an absolute http or https URL.
func parseCheckURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		// url.Parse's error would quote the URL, and with it any password in it.
		return nil, errors.New("must be an absolute http or https URL")
	}
	return u, nil
}

// Run takes probe requests in the queue group until ctx ends, running at most Concurrency
// probes at once. On return it has unsubscribed and every probe it started has finished
// (probes cut short by the end of ctx record nothing).
func (p *Prober) Run(ctx context.Context) error {
	// Only the loop below starts probes, so this Wait never races an Add. Deferred first, it
	// runs last: the subscriptions are gone (new requests go to other probers) while the
	// probes in flight finish.
	var wg sync.WaitGroup
	defer wg.Wait()
	msgs := make(chan *nats.Msg, backlog)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range p.subjects {
		s, err := p.cfg.NC.ChanQueueSubscribe(subj, events.ProbeQueue, msgs)
		if err != nil {
			return fmt.Errorf("prober: subscribe to %s: %w", subj, err)
		}
		subs = append(subs, s)
	}
	// Not fatal: the client re-sends the interest when it reconnects.
	fctx, cancel := context.WithTimeout(ctx, flushBudget)
	if err := p.cfg.NC.FlushWithContext(fctx); err != nil && ctx.Err() == nil {
		p.log.Warn("flush of the probe subscriptions", "err", err)
	}
	cancel()
	p.log.Info("prober started", "subjects", p.subjects, "concurrency", p.cfg.Concurrency)

	sem := make(chan struct{}, p.cfg.Concurrency)
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case m = <-msgs:
		}
		select {
		case <-ctx.Done():
			return nil
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			p.handle(ctx, m.Subject, m.Data)
		})
	}
}
