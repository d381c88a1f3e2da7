package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/health"
	"github.com/egressd/egressd/workers/prober"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
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
	gateway     gatewayFlags
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
	fs.StringVar(&f.roles, "roles", "all", "roles to run: all, or a comma list of reconciler,provisioner,prober,leaser,gateway (the gateway runs with --gateway-listen)")
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
	f.gateway.register(fs)
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

type roleSet struct{ reconciler, provisioner, prober, leaser, gateway bool }

func parseRoles(s string) (roleSet, error) {
	var r roleSet
	for _, name := range strings.Split(s, ",") {
		switch strings.TrimSpace(name) {
		case "all":
			r = roleSet{true, true, true, true, true}
		case "reconciler":
			r.reconciler = true
		case "provisioner":
			r.provisioner = true
		case "prober":
			r.prober = true
		case "leaser":
			r.leaser = true
		case "gateway":
			r.gateway = true
		default:
			return roleSet{}, fmt.Errorf("--roles: unknown role %q (all, reconciler, provisioner, prober, leaser, gateway)", name)
		}
	}
	return r, nil
}

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
