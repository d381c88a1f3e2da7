package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

type runFlags struct {
	dataDir    string
	configPath string
	natsURL    string
	natsListen string
	roles      string
	provision  string
	replicas   int
	logLevel   string
	leaderTTL  time.Duration
	gc         provisioner.GC
	checks     provisioner.Checks
}

func runCmd(ctx context.Context, args []string, stderr io.Writer) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "./egressd-data", "where the embedded NATS server and the local provider keep their state")
	fs.StringVar(&f.configPath, "config", "", "YAML config declaring providers (default: one local provider named local)")
	fs.StringVar(&f.natsURL, "nats-url", "", "use this NATS server instead of the embedded one")
	fs.StringVar(&f.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server")
	fs.StringVar(&f.roles, "roles", "all", "roles to run: all, or a comma list of reconciler,provisioner")
	fs.StringVar(&f.provision, "provision", "", "providers this process provisions (comma list; default all in the config)")
	fs.IntVar(&f.replicas, "replicas", 1, "JetStream replicas of buckets and streams (3 on a cluster)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.leaderTTL, "leader-ttl", 10*time.Second, "reconciler leader lease; a standby takes over within it")
	fs.DurationVar(&f.gc.Interval, "gc-interval", provisioner.DefaultGC().Interval, "how often orphans are collected per host (0 disables)")
	fs.DurationVar(&f.gc.MinAge, "gc-min-age", provisioner.DefaultGC().MinAge, "an orphan younger than this is left alone")
	fs.DurationVar(&f.checks.Interval, "check-interval", provisioner.DefaultChecks().Interval, "how often provider targets are checked (at least 10s; 0 disables)")
	if err := fs.Parse(args); err != nil {
		return 2
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
	if err := run(ctx, f, log); err != nil {
		log.Error("egressd run failed", "err", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func parseRoles(s string) (reconcile, provision bool, err error) {
	for _, r := range strings.Split(s, ",") {
		switch strings.TrimSpace(r) {
		case "all":
			reconcile, provision = true, true
		case "reconciler":
			reconcile = true
		case "provisioner":
			provision = true
		default:
			return false, false, fmt.Errorf("--roles: unknown role %q (all, reconciler, provisioner)", r)
		}
	}
	return reconcile, provision, nil
}

func run(ctx context.Context, f runFlags, log *slog.Logger) error {
	cfg, err := loadConfig(f.configPath)
	if err != nil {
		return err
	}
	doReconcile, doProvision, err := parseRoles(f.roles)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	url := f.natsURL
	var opts []nats.Option
	if url == "" {
		srv, err := startEmbedded(f.dataDir, f.natsListen, log)
		if err != nil {
			return err
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv))
		log.Info("embedded NATS server ready", "url", "nats://"+f.natsListen, "store", f.dataDir)
	}
	nc, err := connect(url, log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ko := kvstore.Options{Replicas: f.replicas}
	store, err := kvstore.Ensure(setupCtx, js, ko)
	if err != nil {
		return err
	}
	installation, err := ensureInstallation(setupCtx, store)
	if err != nil {
		return err
	}
	holder := identity()
	log = log.With("installation", installation)

	g, gctx := errgroup.WithContext(ctx)
	if doProvision {
		serve := splitList(f.provision)
		for _, pc := range cfg.Providers {
			if len(serve) > 0 && !slices.Contains(serve, pc.Name) {
				continue
			}
			b, err := buildProvider(pc, f.dataDir, log)
			if err != nil {
				return err
			}
			p, err := provisioner.New(provisioner.Config{Provider: pc.Name, Backend: b, Catalog: b.Catalog(),
				Installation: installation, Worker: holder, Store: store, Log: log, GC: f.gc, Checks: f.checks})
			if err != nil {
				return err
			}
			// The catalog is published before the reconciler starts, so no spec is judged
			// Invalid for a provider that is only a moment away.
			if err := p.Setup(setupCtx, ko); err != nil {
				return err
			}
			g.Go(func() error { return p.Run(gctx) })
		}
	}
	if doReconcile {
		r, err := reconciler.New(reconciler.Config{Store: store, NC: nc, Installation: installation, Holder: holder,
			LeaderTTL: f.leaderTTL, Log: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return r.Run(gctx) })
	}
	log.Info("egressd running", "roles", f.roles, "providers", len(cfg.Providers))
	err = g.Wait()
	log.Info("egressd stopped")
	return err
}

func connect(url string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts,
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
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrl()) }),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
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
