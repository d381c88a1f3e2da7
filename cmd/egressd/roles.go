package main

import (
	"context"
	"errors"
	"fmt"

	"slices"

	"github.com/egressd/egressd/cmd/egressd/internal/config"
	"github.com/egressd/egressd/events"

	"github.com/egressd/egressd/readside/metrics"
	"github.com/egressd/egressd/readside/statuspage"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/pools"
	"github.com/egressd/egressd/workers/prober"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"golang.org/x/sync/errgroup"
)

// role is one part `egressd run` may start on what the daemon opened: when it is wanted,
// how it is built (an error stops the start), and which parts it must start after. Adding
// a part is one entry in roleTable.
type role struct {
	name   string
	wanted func(d *daemon) bool
	// build makes the part ready within setupCtx's budget; the runner it returns runs until
	// its context ends (nil) or it fails.
	build func(setupCtx context.Context, d *daemon) (runner, error)
	after []string
	// buckets are the buckets the part uses (its Buckets, from BucketsOf): the daemon creates
	// the missing ones where its user may (kvstore.Open), as after an upgrade that added one.
	buckets []string
}

type runner func(ctx context.Context) error

func always(*daemon) bool { return true }

// roleTable is every part of `egressd run`. startRoles starts the wanted ones in the order of
// their after lists (the table's order among parts that do not depend on each other).
var roleTable = []role{
	{name: "health", wanted: always, build: func(_ context.Context, d *daemon) (runner, error) { return d.hc.Run, nil }},
	{name: "metrics", after: []string{"health"},
		wanted: func(d *daemon) bool { return d.ls.metrics != nil },
		build: func(_ context.Context, d *daemon) (runner, error) {
			ln := d.ls.metrics
			d.log.Info("serving /metrics and /healthz", "url", "http://"+ln.Addr().String())
			h := d.obs.Handler(d.hc.Alive, readyCheck(d.nc, d.hc))
			return func(ctx context.Context) error { return metrics.Serve(ctx, ln, h) }, nil
		}},
	{name: "statuspage", wanted: func(d *daemon) bool { return d.ls.ui != nil }, build: buildStatusPage, buckets: allBuckets},
	{name: "pprof", wanted: func(d *daemon) bool { return d.ls.pprof != nil },
		build: func(_ context.Context, d *daemon) (runner, error) {
			ln := d.ls.pprof
			d.log.Info("serving pprof", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
			return func(ctx context.Context) error { return servePprof(ctx, ln) }, nil
		}},
	{name: "leasemasters", wanted: func(d *daemon) bool { return d.leaseKeys != nil }, build: buildLeaseMasters},
	{name: "provisioner", wanted: func(d *daemon) bool { return len(d.backends) > 0 }, build: buildProvisioners,
		buckets: []string{events.BucketProxies, events.BucketStatus, events.BucketCloudInit, events.BucketCatalog, events.BucketProviderHealth, events.BucketLocks,
			events.BucketLeaseState, events.BucketQuarantine}},
	{name: "echo", wanted: func(d *daemon) bool { return d.ls.echo != nil },
		build: func(_ context.Context, d *daemon) (runner, error) {
			ln := d.ls.echo
			return func(ctx context.Context) error { return prober.ServeEcho(ctx, ln) }, nil
		}},
	{name: "prober", after: []string{"echo"}, wanted: func(d *daemon) bool { return d.roles.prober }, build: buildProber,
		buckets: []string{events.BucketProxies, events.BucketStatus, events.BucketHealth, events.BucketProbers}},
	{name: "leaser", wanted: func(d *daemon) bool { return d.roles.leaser }, build: buildLeaser,
		buckets: []string{events.BucketProxies, events.BucketStatus, events.BucketHealth, events.BucketPools, events.BucketCooldowns, events.BucketLeaseState,
			events.BucketPoolDemand}},
	// The gateway takes leases over NATS like any crawler (it uses no bucket itself); after
	// the leaser, so that an all-in-one's first request finds the service up.
	{name: "gateway", after: []string{"leaser"}, build: buildGateway,
		wanted: func(d *daemon) bool { return d.roles.gateway && d.f.gateway.listen != "" }},
	// The reloader is started once what it reloads (the lease HTTP face, the gateway) exists.
	{name: "reload", after: []string{"leaser", "gateway"}, wanted: always,
		build: func(_ context.Context, d *daemon) (runner, error) { return d.reload.watch, nil }},
	// The catalogs are published before the reconciler starts, so no spec is judged Invalid
	// for a provider that is only a moment away.
	{name: "reconciler", after: []string{"provisioner"}, wanted: func(d *daemon) bool { return d.roles.reconciler },
		buckets: []string{events.BucketProxies, events.BucketCloudInit, events.BucketCatalog, events.BucketHealth,
			events.BucketProviderHealth, events.BucketStatus, events.BucketLocks},
		build: func(_ context.Context, d *daemon) (runner, error) {
			h := d.cfg.HealthPolicy()
			r, err := reconciler.New(reconciler.Config{Buckets: reconciler.BucketsOf(d.store), Installation: d.installation, Holder: d.holder,
				LeaderTTL: d.f.leaderTTL, LeaseSpreadInterval: spreadInterval(d.f.spread), MaxInstances: d.cfg.MaxInstances(),
				Brake: reconciler.Brake{Share: h.BrakeShare, Minimum: h.BrakeMinimum}, ReplaceUnhealthyAfter: h.ReplaceAfter, Log: d.log,
				Boots: d.obs})
			if err != nil {
				return nil, err
			}
			return r.Run, nil
		}},
	// The pool controller lives beside the reconciler, under a leader lease of its own: it
	// only writes specs, which the reconciler then acts on like any other.
	{name: "pools", after: []string{"reconciler"}, wanted: func(d *daemon) bool { return d.roles.reconciler },
		buckets: []string{events.BucketPools, events.BucketStatus, events.BucketCatalog, events.BucketProxies, events.BucketPoolStatus, events.BucketLocks,
			events.BucketPoolDemand, events.BucketHealth, events.BucketQuarantine},
		build: func(_ context.Context, d *daemon) (runner, error) {
			pc, err := pools.New(pools.Config{Buckets: pools.BucketsOf(d.store), Holder: d.holder, LeaderTTL: d.f.leaderTTL, Log: d.log})
			if err != nil {
				return nil, err
			}
			return pc.Run, nil
		}},
}

// allBuckets is every bucket: the status page shows them all.
var allBuckets = []string{events.BucketProxies, events.BucketCloudInit, events.BucketStatus, events.BucketCatalog,
	events.BucketLocks, events.BucketHealth, events.BucketProviderHealth, events.BucketProbers, events.BucketPools,
	events.BucketPoolStatus, events.BucketCooldowns, events.BucketLeaseState, events.BucketPoolDemand, events.BucketQuarantine}

// bucketsOf is every bucket the wanted parts use, and what every process reads: the
// installation ID (egress_locks) and, for its health check, proxies.
func bucketsOf(d *daemon, table []role) []string {
	names := []string{events.BucketLocks, events.BucketProxies}
	for _, r := range table {
		if r.wanted(d) {
			names = append(names, r.buckets...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func buildStatusPage(_ context.Context, d *daemon) (runner, error) {
	page, err := statuspage.New(statuspage.Config{Store: d.store, Log: d.log.With("component", "statuspage")})
	if err != nil {
		return nil, err
	}
	ln := d.ls.ui
	d.log.Info("serving the status page", "url", "http://"+ln.Addr().String()+"/")
	return func(ctx context.Context) error { return metrics.Serve(ctx, ln, page.Handler()) }, nil
}

// buildProvisioners makes one provisioner per provider this process provisions and publishes
// (or, declaring, sets up) each one's catalog; the runner runs them all.
func buildProvisioners(setupCtx context.Context, d *daemon) (runner, error) {
	var runs []runner
	for _, pb := range d.backends {
		cat := pb.b.Catalog()
		cat.Limits = pb.pc.Limits(cat.Limits) // the config's create-rate limit rides with the catalog
		p, err := provisioner.New(provisioner.Config{Provider: pb.name, Backend: pb.b, Catalog: cat,
			Installation: d.installation, Worker: d.holder, Buckets: provisioner.BucketsOf(d.store), Log: d.log, GC: d.f.gc, Checks: d.f.checks,
			Observer: d.obs, Leftovers: config.LeftoversOf(pb.b), LeaseMaster: d.leaseKeys})
		if err != nil {
			return nil, err
		}
		publish := p.PublishCatalog
		if d.declare {
			publish = func(ctx context.Context) error { return p.Setup(ctx, d.ko) }
		}
		if err := publish(setupCtx); err != nil {
			return nil, err
		}
		runs = append(runs, p.Run)
		if w, ok := pb.b.(provisioner.RevocationWriter); ok && d.store.LeaseState != nil {
			// The provider's proxies get the revocation list as they get their keys: from
			// the process that provisions them (docs/leases.md#revocation).
			name := pb.name
			runs = append(runs, provisioner.Revocations{KV: provisioner.BucketsOf(d.store).LeaseState, Deliver: w.WriteRevocations,
				Log:     d.log.With("component", "revocations", "provider", name),
				Observe: func(n int) { d.obs.ObserveRevocationList(name, n) }}.Follow)
		}
		if w, ok := pb.b.(provisioner.LeaseKeyWriter); ok && d.leaseKeys != nil {
			name := pb.name
			// A master rotation reaches running proxies through their provisioner (decision 88).
			runs = append(runs, provisioner.LeaseKeys{Provider: pb.name, Worker: d.holder, Source: d.leaseKeys, Writer: w,
				Locks: d.store.Locks, Log: d.log.With("component", "leasekeys", "provider", pb.name),
				Observe: func(phase string, holders map[string]int) { d.obs.ObserveLeaseKeys(name, phase, holders) }}.Run)
		}
		if c, ok := pb.b.(interface {
			LeaseRefusals() (map[string]int64, error)
		}); ok {
			d.obs.RegisterRefusals(pb.name, c.LeaseRefusals)
		}
	}
	return func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, run := range runs {
			g.Go(func() error { return run(gctx) })
		}
		return g.Wait()
	}, nil
}

func buildProber(_ context.Context, d *daemon) (runner, error) {
	checkURL := d.f.checkURL
	if ln := d.ls.echo; ln != nil {
		checkURL = "http://" + ln.Addr().String() + "/"
	}
	p, err := prober.New(prober.Config{Buckets: prober.BucketsOf(d.store), NC: d.nc, Worker: d.holder, Filters: splitList(d.f.probe),
		DefaultCheckURL: checkURL, Concurrency: d.f.probeConc, Log: d.log, Observer: d.obs, LeaseMaster: d.leaseKeys})
	if err != nil {
		return nil, err
	}
	return p.Run, nil
}

// The metrics hear of waiting acquires (egress_lease_waiting, egress_lease_wait_seconds).
var _ leaser.WaitObserver = (*metrics.Metrics)(nil)

// The metrics hear of lease shards whose view stands still (egress_lease_view_stands_still,
// egress_lease_view_direct_reads_total; decision 100).
var _ leaser.FreshnessObserver = (*metrics.Metrics)(nil)

func buildLeaser(_ context.Context, d *daemon) (runner, error) {
	lh, cert, err := d.f.leaseHTTP.listener(d.cfg, d.roles)
	if err != nil {
		return nil, err
	}
	raw, interval := d.cfg.LeaseHistory()
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(d.store), NC: d.nc, Worker: d.holder, Log: d.log, Observer: d.obs,
		RawEvents: raw, StatsInterval: interval, LeaseMaster: d.leaseKeys, HTTP: lh, MaxPerHolder: d.cfg.MaxPerHolder(),
		MaxWait: d.cfg.MaxWait(), DemandWindow: d.cfg.DemandWindow(), Escalation: d.cfg.Escalation(), Pace: d.cfg.Pace(),
		Neighbours: d.cfg.Neighbours(), BestForTarget: d.cfg.BestForTarget(), Tiers: d.cfg.Tiers()})
	if err != nil {
		return nil, err
	}
	if lh != nil {
		d.reload.leaser, d.reload.cert = l, cert
	}
	return l.Run, nil
}

// startRoles builds and starts the wanted roles in dependency order and owns them: every
// return, a role failing to build as much as a clean stop, cancels what was started and
// waits for it, before the daemon closes NATS and the providers. An error of a started role
// is returned along with the one that ended the start.
func startRoles(ctx, setupCtx context.Context, d *daemon, table []role) (err error) {
	order, err := startOrder(table)
	if err != nil {
		return err
	}
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
	for _, r := range order {
		if !r.wanted(d) {
			continue
		}
		run, err := r.build(setupCtx, d)
		if err != nil {
			return err
		}
		g.Go(func() error { return run(gctx) })
	}
	d.hc.SetReady()
	d.log.Info("egressd running", "roles", d.f.roles, "providers", len(d.cfg.Providers))
	err = g.Wait()
	d.log.Info("egressd stopped")
	return err
}

// startOrder sorts the table so that every role comes after those its after list names,
// keeping the table's order otherwise. An unknown name or a cycle is a mistake in the table.
func startOrder(table []role) ([]role, error) {
	index := map[string]int{}
	for i, r := range table {
		if _, dup := index[r.name]; dup {
			return nil, fmt.Errorf("role table: %s is listed twice", r.name)
		}
		index[r.name] = i
	}
	const (
		unseen = iota
		visiting
		done
	)
	state := make([]int, len(table))
	var order []role
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case visiting:
			return fmt.Errorf("role table: %s depends on itself through its after list", table[i].name)
		case done:
			return nil
		}
		state[i] = visiting
		for _, a := range table[i].after {
			j, ok := index[a]
			if !ok {
				return fmt.Errorf("role table: %s starts after %q, which is no role", table[i].name, a)
			}
			if err := visit(j); err != nil {
				return err
			}
		}
		state[i] = done
		order = append(order, table[i])
		return nil
	}
	for i := range table {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}
