package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/health"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/egressd/egressd/readside/statuspage"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/pools"
	"github.com/egressd/egressd/workers/prober"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

type runFlags struct {
	dataDir     string
	configPath  string
	natsURL     string
	natsListen  string
	roles       string
	provision   string
	replicas    int
	logLevel    string
	leaderTTL   time.Duration
	spread      time.Duration
	gc          provisioner.GC
	checks      provisioner.Checks
	probe       string
	echoListen  string
	checkURL    string
	probeConc   int
	metrics     string
	uiListen    string
	declare     bool
	pprof       string
	healthBound time.Duration
	leaseHTTP   leaseHTTPFlags
}

func runCmd(ctx context.Context, args []string, stderr io.Writer) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "./egressd-data", "where the embedded NATS server and the local provider keep their state")
	fs.StringVar(&f.configPath, "config", "", "YAML config declaring providers (default: one local provider named local)")
	fs.StringVar(&f.natsURL, "nats-url", "", "use this NATS server instead of the embedded one (credentials: "+envUser+", "+envPassword+")")
	fs.BoolVar(&f.declare, "declare", false, "with --nats-url: declare the buckets, the event streams and the op streams of the providers this process provisions (needs admin rights; always done with the embedded server; egressd setup declares every provider's)")
	fs.StringVar(&f.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server")
	fs.StringVar(&f.roles, "roles", "all", "roles to run: all, or a comma list of reconciler,provisioner,prober,leaser")
	fs.StringVar(&f.provision, "provision", "", "providers this process provisions (comma list; default all in the config)")
	fs.IntVar(&f.replicas, "replicas", 1, "JetStream replicas of buckets and streams (3 on a cluster)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.leaderTTL, "leader-ttl", 10*time.Second, "reconciler leader lease; a standby takes over within it")
	fs.DurationVar(&f.spread, "lease-leader-spread", reconciler.DefaultLeaseSpreadInterval, "how often the leading reconciler spreads the lease shards' stream leaders over the NATS servers again after a crash (0 never)")
	fs.DurationVar(&f.gc.Interval, "gc-interval", provisioner.DefaultGC().Interval, "how often orphans are collected per host (0 disables)")
	fs.DurationVar(&f.gc.MinAge, "gc-min-age", provisioner.DefaultGC().MinAge, "an orphan younger than this is left alone")
	fs.StringVar(&f.probe, "probe", "", "providers or provider.host pairs this prober serves (comma list; default all)")
	fs.StringVar(&f.echoListen, "echo-listen", "127.0.0.1:0", "where the prober serves the echo endpoint probes reach through the proxies")
	fs.IntVar(&f.probeConc, "probe-concurrency", prober.DefaultConcurrency, "probes this prober runs at once at most")
	fs.StringVar(&f.checkURL, "probe-check-url", "", "default check URL for probes (default: this process's echo endpoint); must be reachable from the proxies")
	fs.StringVar(&f.uiListen, "ui-listen", "127.0.0.1:8080", "where the all-in-one serves its read-only status page (empty disables; no login: keep it on loopback)")
	fs.StringVar(&f.metrics, "metrics-listen", "127.0.0.1:9464", "where /metrics and /healthz are served (empty disables)")
	fs.StringVar(&f.pprof, "pprof-listen", "", "serve net/http/pprof on this loopback address (empty, the default, disables; a non-loopback address is refused)")
	fs.DurationVar(&f.checks.Interval, "check-interval", provisioner.DefaultChecks().Interval, "how often provider targets are checked (at least 10s; 0 disables)")
	fs.DurationVar(&f.healthBound, "health-timeout", health.DefaultBound, "/healthz fails when JetStream has not answered for this long (/readyz at once)")
	f.leaseHTTP.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "egressd run:", err)
		return 2
	}
	if f.checks.Interval != 0 && f.checks.Interval < provisioner.MinCheckInterval {
		fmt.Fprintf(stderr, "egressd run: --check-interval %s: must be at least %s\n", f.checks.Interval, provisioner.MinCheckInterval)
		return 2
	}
	if f.probeConc < 1 {
		fmt.Fprintf(stderr, "egressd run: --probe-concurrency %d: must be at least 1\n", f.probeConc)
		return 2
	}
	if f.pprof != "" {
		if err := checkPprofAddr(f.pprof); err != nil {
			fmt.Fprintln(stderr, "egressd run:", err)
			return 2
		}
	}
	stopTracing, err := setupTracing(ctx, os.Stdout, log)
	if err != nil {
		fmt.Fprintln(stderr, "egressd run:", err)
		return 2
	}
	defer stopTracing()
	if err := run(ctx, f, log); err != nil {
		log.Error("egressd run failed", "err", err)
		return 1
	}
	return 0
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

type roleSet struct{ reconciler, provisioner, prober, leaser bool }

func parseRoles(s string) (roleSet, error) {
	var r roleSet
	for _, name := range strings.Split(s, ",") {
		switch strings.TrimSpace(name) {
		case "all":
			r = roleSet{true, true, true, true}
		case "reconciler":
			r.reconciler = true
		case "provisioner":
			r.provisioner = true
		case "prober":
			r.prober = true
		case "leaser":
			r.leaser = true
		default:
			return roleSet{}, fmt.Errorf("--roles: unknown role %q (all, reconciler, provisioner, prober, leaser)", name)
		}
	}
	return r, nil
}

func run(ctx context.Context, f runFlags, log *slog.Logger) (err error) {
	setGCPercent(log)
	// SIGHUP is caught before anything else, so one sent while egressd starts cannot end it.
	reload, stopReload := newReloader(f.configPath, log)
	defer stopReload()
	cfg, err := loadConfig(f.configPath)
	if err != nil {
		return err
	}
	reload.running = cfg
	roles, err := parseRoles(f.roles)
	if err != nil {
		return err
	}
	if !roles.leaser && f.leaseHTTP.listen != "" {
		return errors.New("--lease-http-listen: the leaser role serves it; add leaser to --roles")
	}
	if f.natsURL == "" {
		// Before anything in the data directory is opened: the store has one writer.
		lock, err := lockDataDir(f.dataDir, f.natsListen)
		if err != nil {
			return err
		}
		defer lock.Close()
		if err := checkNATSPort(f.natsListen); err != nil {
			return err
		}
	} else if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	ls, err := bindListeners(f, roles)
	if err != nil {
		return err
	}
	defer ls.close()
	// Providers are built (their config validated) before anything starts, so a bad config
	// block stops egressd before it touches NATS.
	type built struct {
		name string
		b    backend
	}
	var backends []built
	hooks := &providerHooks{}
	if roles.provisioner {
		serve := splitList(f.provision)
		for _, pc := range cfg.Providers {
			if len(serve) > 0 && !slices.Contains(serve, pc.Name) {
				continue
			}
			b, err := buildProvider(pc, f.dataDir, log, hooks)
			if err != nil {
				return err
			}
			backends = append(backends, built{pc.Name, b})
			if c, ok := b.(io.Closer); ok {
				defer c.Close()
			}
		}
	}
	url := f.natsURL
	var opts []nats.Option
	if url == "" {
		srv, err := startEmbedded(ctx, f.dataDir, f.natsListen, log)
		if err != nil {
			return err
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv))
		log.Info("embedded NATS server ready", "url", srv.ClientURL(), "store", f.dataDir)
	}
	nc, err := connect(url, log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	// Async publishes (events, the reconciler's pipelined writes) whose ack never comes are
	// dropped from the client's pending set after the ack budget, so lost acks cannot pile up
	// to the client's limit and stall every writer sharing it.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(kvstore.PublishAckBudget))
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Only an admin declares resources on a shared NATS (deploy/nats); every other role binds.
	declare := f.natsURL == "" || f.declare
	ko := kvstore.Options{Replicas: f.replicas, Events: cfg.eventLimits()}
	var store *kvstore.Store
	var installation string
	if declare {
		if store, err = kvstore.Ensure(setupCtx, js, ko); err != nil {
			return err
		}
		installation, err = ensureInstallation(setupCtx, store)
		if err == nil && f.natsURL == "" {
			err = pruneCatalogLogged(setupCtx, store, cfg, log)
		}
	} else {
		if store, err = bindWhenReady(setupCtx, js, log); err != nil {
			return err
		}
		installation, err = readInstallation(setupCtx, store)
	}
	if err != nil {
		return err
	}
	// The roles that sign or deliver lease tokens hold the lease master; the reconciler never
	// needs it.
	var leaseMaster leaseauth.Master
	if roles.provisioner || roles.prober || roles.leaser {
		if declare {
			leaseMaster, err = ensureLeaseMaster(setupCtx, store)
		} else {
			leaseMaster, err = readLeaseMaster(setupCtx, store)
		}
		if errors.Is(err, errNoLeaseMaster) {
			// An installation set up before lease-bound credentials: everything else works,
			// and a proxy with auth.mode "lease" says why it does not (its create fails, its
			// probes get 407) until setup runs again.
			log.Warn("proxies with auth.mode lease will not work", "err", err)
			err = nil
		}
		if err != nil {
			return err
		}
	}
	holder := identity()
	log = log.With("installation", installation)
	hooks.connect(store, holder, log)

	// The state metrics read every bucket: only processes that may (the reconciler's user,
	// the all-in-one) export them; others export their own counters.
	obs := metrics.New(store, nc, roles.reconciler)
	// Every return from here on, a role failing to start as much as a clean stop, cancels what
	// was started and waits for it, before NATS and the providers are closed (deferred above);
	// an error of a started part is returned along with the one that ended the start.
	rolesCtx, stopRoles := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(rolesCtx)
	defer func() {
		stopRoles()
		// A part cut short by stopRoles says only that (context.Canceled); that is no news
		// beside the error that ended the start.
		if werr := g.Wait(); werr != nil && werr != err && !(err != nil && errors.Is(werr, context.Canceled)) {
			err = errors.Join(err, werr)
		}
	}()
	hc := health.New(func(ctx context.Context) error { _, err := store.Proxies.Status(ctx); return err }, f.healthBound)
	g.Go(func() error { return hc.Run(gctx) })
	if ln := ls.metrics; ln != nil {
		log.Info("serving /metrics and /healthz", "url", "http://"+ln.Addr().String())
		g.Go(func() error { return metrics.Serve(gctx, ln, obs.Handler(hc.Alive, readyCheck(nc, hc))) })
	}
	if f.uiListen != "" && f.natsURL == "" {
		page, err := statuspage.New(statuspage.Config{Store: store, Log: log.With("component", "statuspage")})
		if err != nil {
			return err
		}
		ln := ls.ui
		log.Info("serving the status page", "url", "http://"+ln.Addr().String()+"/")
		g.Go(func() error { return metrics.Serve(gctx, ln, page.Handler()) })
	}
	if ln := ls.pprof; ln != nil {
		log.Info("serving pprof", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
		g.Go(func() error { return servePprof(gctx, ln) })
	}
	for _, pb := range backends {
		p, err := provisioner.New(provisioner.Config{Provider: pb.name, Backend: pb.b, Catalog: pb.b.Catalog(),
			Installation: installation, Worker: holder, Buckets: provisioner.BucketsOf(store), Log: log, GC: f.gc, Checks: f.checks, Observer: obs,
			Leftovers: leftoversOf(pb.b), LeaseMaster: leaseMaster})
		if err != nil {
			return err
		}
		// The catalog is published before the reconciler starts, so no spec is judged
		// Invalid for a provider that is only a moment away.
		publish := p.PublishCatalog
		if declare {
			publish = func(ctx context.Context) error { return p.Setup(ctx, ko) }
		}
		if err := publish(setupCtx); err != nil {
			return err
		}
		g.Go(func() error { return p.Run(gctx) })
	}
	if roles.prober {
		checkURL := f.checkURL
		if ln := ls.echo; ln != nil {
			checkURL = "http://" + ln.Addr().String() + "/"
			g.Go(func() error { return prober.ServeEcho(gctx, ln) })
		}
		p, err := prober.New(prober.Config{Buckets: prober.BucketsOf(store), NC: nc, Worker: holder, Filters: splitList(f.probe),
			DefaultCheckURL: checkURL, Concurrency: f.probeConc, Log: log, Observer: obs, LeaseMaster: leaseMaster})
		if err != nil {
			return err
		}
		g.Go(func() error { return p.Run(gctx) })
	}
	if roles.leaser {
		lh, cert, err := f.leaseHTTP.listener(cfg, roles)
		if err != nil {
			return err
		}
		raw, interval := cfg.leaseHistory()
		l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(store), NC: nc, Worker: holder, Log: log, Observer: obs,
			RawEvents: raw, StatsInterval: interval, LeaseMaster: leaseMaster, HTTP: lh, MaxPerHolder: cfg.maxPerHolder()})
		if err != nil {
			return err
		}
		if lh != nil {
			reload.leaser, reload.cert = l, cert
		}
		g.Go(func() error { return l.Run(gctx) })
	}
	// Started once what it reloads exists.
	g.Go(func() error { return reload.watch(gctx) })
	if roles.reconciler {
		r, err := reconciler.New(reconciler.Config{Buckets: reconciler.BucketsOf(store), Installation: installation, Holder: holder,
			LeaderTTL: f.leaderTTL, LeaseSpreadInterval: spreadInterval(f.spread), Log: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return r.Run(gctx) })
		// The pool controller lives beside the reconciler, under a leader lease of its own:
		// it only writes specs, which the reconciler then acts on like any other.
		pc, err := pools.New(pools.Config{Buckets: pools.BucketsOf(store), Holder: holder, LeaderTTL: f.leaderTTL, Log: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return pc.Run(gctx) })
	}
	hc.SetReady()
	log.Info("egressd running", "roles", f.roles, "providers", len(cfg.Providers))
	err = g.Wait()
	log.Info("egressd stopped")
	return err
}

// bindWhenReady binds the buckets, waiting (within ctx) for an admin's `egressd setup` to
// declare them: roles may start before it, as systemd starts units in parallel.
func bindWhenReady(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*kvstore.Store, error) {
	for logged := false; ; {
		store, err := kvstore.Bind(ctx, js)
		if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
			return store, err
		}
		if !logged {
			log.Warn("waiting for the buckets to be declared (`egressd setup`)", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readyCheck is /readyz: the start is over, the NATS connection is up and JetStream answered
// the latest round trip. /healthz is hc.Alive, which tolerates a short outage.
func readyCheck(nc *nats.Conn, hc *health.Checker) func() error {
	return func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("NATS connection is %s", nc.Status())
		}
		return hc.Ready()
	}
}

func connect(url string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := authOptions()
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, auth...),
		nats.Name("egressd "+identity()),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(url), err)
	}
	return nc, nil
}

var processID = func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%d", h, os.Getpid(), time.Now().UnixNano()%100000)
}()

func identity() string { return processID }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// spreadInterval maps the flag (0 never) onto reconciler.Config (0 the default, negative never).
func spreadInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
