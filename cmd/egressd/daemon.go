package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/internal/health"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// daemon is what `egressd run` has opened before its roles start (roles.go): the config,
// the bound addresses, the built providers, the NATS connection and the store. The roles
// read it; only the start writes it.
type daemon struct {
	f      runFlags
	log    *slog.Logger
	cfg    config.File
	roles  roleSet
	reload *reloader
	ls     *listeners
	hooks  *providerHooks
	// backends are the providers this process provisions, built (their config validated)
	// before anything starts, so a bad config block stops egressd before it touches NATS.
	backends []namedBackend
	nc       *nats.Conn
	store    *kvstore.Store
	// declare: this process declares the buckets and streams (the embedded server, or
	// --declare); otherwise it binds what an admin's `egressd setup` declared.
	declare      bool
	ko           kvstore.Options
	installation string
	holder       string
	leaseKeys    *leaseauth.Live // nil: no lease master
	obs          *metrics.Metrics
	hc           *health.Checker
	// closers undo the start, last first, once every role has stopped.
	closers []func()
}

type namedBackend struct {
	name string
	b    config.Backend
	pc   config.Provider // its entry: the limits the catalog carries
}

func (d *daemon) onClose(f func()) { d.closers = append(d.closers, f) }

func (d *daemon) close() {
	for _, f := range slices.Backward(d.closers) {
		f()
	}
}

func run(ctx context.Context, f runFlags, log *slog.Logger) (err error) {
	setGCPercent(log)
	d := &daemon{f: f, log: log, hooks: &providerHooks{}}
	// SIGHUP is caught before anything else, so one sent while egressd starts cannot end it.
	reload, stopReload := newReloader(f.configPath, log)
	d.reload = reload
	d.onClose(stopReload)
	defer d.close()
	if err := d.prepare(); err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.open(ctx, setupCtx); err != nil {
		return err
	}
	return startRoles(ctx, setupCtx, d, roleTable)
}

// prepare reads the config and the flags, locks the data directory, binds the addresses and
// builds the providers: everything that can fail on this machine alone, before NATS.
func (d *daemon) prepare() error {
	f := d.f
	cfg, err := config.Load(f.configPath)
	if err != nil {
		return err
	}
	d.cfg, d.reload.running = cfg, cfg
	if d.roles, err = parseRoles(f.roles); err != nil {
		return err
	}
	if !d.roles.leaser && f.leaseHTTP.listen != "" {
		return errors.New("--lease-http-listen: the leaser role serves it; add leaser to --roles")
	}
	if !d.roles.gateway && f.gateway.listen != "" {
		return errors.New("--gateway-listen: the gateway role serves it; add gateway to --roles")
	}
	if f.natsURL == "" {
		// Before anything in the data directory is opened: the store has one writer.
		lock, err := lockDataDir(f.dataDir, f.natsListen)
		if err != nil {
			return err
		}
		d.onClose(func() { lock.Close() })
		if err := checkNATSPort(f.natsListen); err != nil {
			return err
		}
	} else if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if d.ls, err = bindListeners(f, d.roles); err != nil {
		return err
	}
	d.onClose(d.ls.close)
	if !d.roles.provisioner {
		return nil
	}
	serve := splitList(f.provision)
	for _, pc := range cfg.Providers {
		if len(serve) > 0 && !slices.Contains(serve, pc.Name) {
			continue
		}
		b, err := config.Build(pc, f.dataDir, d.log, d.hooks.forProviders())
		if err != nil {
			return err
		}
		d.backends = append(d.backends, namedBackend{pc.Name, b, pc})
		if c, ok := b.(io.Closer); ok {
			d.onClose(func() { c.Close() })
		}
	}
	return nil
}

// open starts the embedded NATS server (unless --nats-url), connects, and declares or binds
// the store, the installation and the lease master.
func (d *daemon) open(ctx, setupCtx context.Context) error {
	f := d.f
	url := f.natsURL
	var opts []nats.Option
	if url == "" {
		srv, err := startEmbedded(ctx, f.dataDir, f.natsListen, d.log)
		if err != nil {
			return err
		}
		d.onClose(func() { srv.Shutdown(); srv.WaitForShutdown() })
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv))
		d.log.Info("embedded NATS server ready", "url", srv.ClientURL(), "store", f.dataDir)
	}
	nc, err := connect(url, d.log, opts...)
	if err != nil {
		return err
	}
	d.nc = nc
	d.onClose(nc.Close)
	// Async publishes (events, the reconciler's pipelined writes) whose ack never comes are
	// dropped from the client's pending set after the ack budget, so lost acks cannot pile up
	// to the client's limit and stall every writer sharing it.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(kvstore.PublishAckBudget))
	if err != nil {
		return err
	}
	// Only an admin declares resources on a shared NATS (deploy/nats); every other role binds.
	d.declare = f.natsURL == "" || f.declare
	d.ko = kvstore.Options{Replicas: f.replicas, Events: d.cfg.EventLimits()}
	if err := d.openStore(setupCtx, js); err != nil {
		return err
	}
	if err := d.openLeaseMaster(setupCtx); err != nil {
		return err
	}
	d.holder = identity()
	d.log = d.log.With("installation", d.installation)
	d.hooks.connect(d.store, d.holder, d.log)
	// The state metrics read every bucket: only processes that may (the reconciler's user,
	// the all-in-one) export them; others export their own counters.
	d.obs = metrics.New(d.store, nc, d.roles.reconciler)
	d.hc = health.New(func(ctx context.Context) error { _, err := d.store.Proxies.Status(ctx); return err }, f.healthBound)
	return nil
}

// openStore declares or binds the buckets and reads (or, declaring, makes) the installation.
func (d *daemon) openStore(ctx context.Context, js jetstream.JetStream) (err error) {
	if !d.declare {
		if d.store, err = bindWhenReady(ctx, js, bucketsOf(d, roleTable), d.log); err != nil {
			return err
		}
		d.installation, err = readInstallation(ctx, d.store)
		return err
	}
	if d.store, err = kvstore.Ensure(ctx, js, d.ko); err != nil {
		return err
	}
	if d.installation, err = ensureInstallation(ctx, d.store); err != nil {
		return err
	}
	if d.f.natsURL == "" {
		return pruneCatalogLogged(ctx, d.store, d.cfg, d.log)
	}
	return nil
}

// openLeaseMaster reads the lease master for the roles that sign or deliver lease tokens;
// the reconciler never needs it.
func (d *daemon) openLeaseMaster(ctx context.Context) (err error) {
	if !d.roles.provisioner && !d.roles.prober && !d.roles.leaser {
		return nil
	}
	var ring leaseauth.Ring
	if d.declare {
		ring, err = ensureLeaseMaster(ctx, d.store)
	} else {
		ring, err = readLeaseMaster(ctx, d.store)
	}
	if err == nil || errors.Is(err, errNoLeaseMaster) {
		// Re-read every leaseMasterPoll (buildLeaseMasters): a rotation reaches the roles so.
		d.leaseKeys = leaseauth.NewLive(ring)
	}
	if errors.Is(err, errNoLeaseMaster) {
		// An installation set up before lease-bound credentials: everything else works,
		// and a proxy with auth.mode "lease" says why it does not (its create fails, its
		// probes get 407) until setup runs again, which the re-read then picks up.
		d.log.Warn("proxies with auth.mode lease will not work", "err", err)
		return nil
	}
	return err
}

// bindWhenReady binds the buckets, waiting (within ctx) for an admin's `egressd setup` to
// declare them: roles may start before it, as systemd starts units in parallel. On an
// installation that exists, a bucket one of names that is missing (one a newer egressd
// added) is created where the user may, or named as missing (kvstore.ErrMissing).
func bindWhenReady(ctx context.Context, js jetstream.JetStream, names []string, log *slog.Logger) (*kvstore.Store, error) {
	for logged := false; ; {
		store, err := kvstore.Open(ctx, js, names)
		if err == nil && len(store.Created) > 0 {
			log.Info("created the buckets this version adds, which the installation lacked", "buckets", store.Created)
		}
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
