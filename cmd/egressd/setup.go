package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// setupCmd declares everything on a shared NATS, as the admin: the buckets, the event streams,
// each configured provider's op stream with one consumer per host, and the installation ID;
// and it removes the catalog records of providers the config no longer declares. It is
// idempotent; run it again after adding or removing a provider or a host.
func setupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server (credentials: "+envUser+", "+envPassword+")")
	configPath := fs.String("config", "", "YAML config declaring providers (default: one local provider named local)")
	replicas := fs.Int("replicas", 1, "JetStream replicas of buckets and streams (3 on a cluster)")
	dataDir := fs.String("data-dir", "./egressd-data", "data directory the config's relative paths are resolved against")
	shards := fs.Int("lease-shards", 0, fmt.Sprintf("buckets the lease slots are spread over, 1 to %d (default: the count already set up, or at the first setup one per replica); changing it needs every lease ended", kvstore.MaxLeaseShards))
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *shards < 0 || *shards > kvstore.MaxLeaseShards {
		fmt.Fprintf(stderr, "egressd setup: --lease-shards: must be between 1 and %d, got %d\n", kvstore.MaxLeaseShards, *shards)
		return 2
	}
	if err := setup(ctx, *natsURL, *configPath, *dataDir, kvstore.Options{Replicas: *replicas, LeaseShards: *shards}, stdout); err != nil {
		fmt.Fprintln(stderr, "egressd setup:", err)
		return 1
	}
	return 0
}

func setup(ctx context.Context, natsURL, configPath, dataDir string, o kvstore.Options, stdout io.Writer) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	o.Events = cfg.EventLimits()
	nc, err := dial(natsURL, "egressd setup", 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := ensureWhileClusterForms(ctx, js, o, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "buckets, "+events.StreamEvents+", "+events.StreamLeaseEvents+" and "+events.StreamLeaseStats+" declared")
	fmt.Fprintln(stdout, eventStreamsLine(o))
	leaders, _, err := kvstore.SpreadLeaseLeaders(ctx, js, store.Leases)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, leaseShardsLine(store.Leases, leaders))
	for _, pc := range cfg.Providers {
		b, err := config.Build(pc, dataDir, discardLogger(), nil)
		if err != nil {
			return err
		}
		hosts := provisioner.HostConfigs(b.Catalog())
		if err := kvstore.EnsureOps(ctx, js, pc.Name, hosts, o); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "provider %s: OPS_%s with %d host consumer(s)\n", pc.Name, pc.Name, len(hosts))
	}
	removed, err := pruneCatalog(ctx, store.Catalog, cfg)
	if err != nil {
		return err
	}
	for _, name := range removed {
		fmt.Fprintf(stdout, "provider %s: removed from %s (no longer configured; its instances are left alone)\n", name, events.BucketCatalog)
	}
	id, err := ensureInstallation(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "installation", id)
	if _, err := ensureLeaseMaster(ctx, store); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "lease master: present (in", events.BucketLocks+"."+events.KeyLeaseMaster+"; never printed)")
	return nil
}

// leaseShardsLine names the lease shards and, on a cluster, the server leading each.
func leaseShardsLine(s kvstore.LeaseShards, leaders []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lease shards: %d", s.Len())
	for i, kv := range s.All() {
		sep := ","
		if i == 0 {
			sep = ":"
		}
		fmt.Fprintf(&b, "%s %s", sep, kv.Bucket())
		if leaders[i] != "" {
			fmt.Fprintf(&b, " (leader %s)", leaders[i])
		}
	}
	return b.String()
}

// jsErrClusterNoPeers is nats-server's JSClusterNoPeersErrF ("no suitable peers for
// placement"); nats.go names no constant for it.
const jsErrClusterNoPeers jetstream.ErrorCode = 10005

// ensureWhileClusterForms declares the buckets and streams, retrying while a freshly started
// cluster's meta leader does not yet see enough servers for the replicas asked: every
// server's /healthz is fine then, but an R3 stream finds no place for a few seconds. Any
// other error, or the end of ctx's budget, is returned as it is.
func ensureWhileClusterForms(ctx context.Context, js jetstream.JetStream, o kvstore.Options, stdout io.Writer) (*kvstore.Store, error) {
	told := false
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		store, err := kvstore.Ensure(ctx, js, o)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrClusterNoPeers {
			return store, err
		}
		if !told {
			fmt.Fprintf(stdout, "waiting for the cluster to have %d servers for the replicas (%v)\n", o.Replicas, apiErr.Description)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (still no place for %d replicas when the setup budget ran out)", err, o.Replicas)
		case <-time.After(wait):
		}
	}
}

// eventStreamsLine tells the limits the event streams were declared with.
func eventStreamsLine(o kvstore.Options) string {
	l := o.Events.WithDefaults()
	return fmt.Sprintf("event limits: %s %s/%s, %s %s/%s, %s %s/%s", events.StreamEvents, l.Lifecycle.MaxAge, mib(l.Lifecycle.MaxBytes),
		events.StreamLeaseEvents, l.Leases.MaxAge, mib(l.Leases.MaxBytes), events.StreamLeaseStats, l.Stats.MaxAge, mib(l.Stats.MaxBytes))
}

func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', -1, 64) + " MiB" }
