package kvstore

import (
	"context"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Options tune the resources for the deployment.
type Options struct {
	Replicas int // 1 on a single server, 3 in a cluster
	// LeaseShards is how many buckets the lease slots are spread over (1 to MaxLeaseShards).
	// 0 keeps the count already recorded, or takes DefaultLeaseShards at the first setup.
	LeaseShards int
	// Events are the limits of the two event streams; a zero field takes its default.
	Events EventLimits
}

// DefaultLeaseShards is the shard count a first setup takes: one per replica, so that on the
// smallest cluster the buckets can live on (as many nodes as replicas) each node can lead one
// shard and a node's crash stalls a third of the proxies (R3), not all of them; one on a
// single server, where a crash stops everything anyway and more streams would only cost.
func DefaultLeaseShards(replicas int) int { return min(max(replicas, 1), MaxLeaseShards) }

// Store holds the handles of egressd's buckets.
type Store struct {
	JS         jetstream.JetStream
	Proxies    jetstream.KeyValue
	CloudInit  jetstream.KeyValue
	Status     jetstream.KeyValue
	Catalog    jetstream.KeyValue
	Locks      jetstream.KeyValue
	Health     jetstream.KeyValue
	Leases     LeaseShards // proxy_leases and its shards
	Cooldowns  jetstream.KeyValue
	LeaseState jetstream.KeyValue // holder slots and sticky sessions (events.BucketLeaseState)
	Probers    jetstream.KeyValue
	Providers  jetstream.KeyValue // provider_health
	Pools      jetstream.KeyValue // PoolSpec by pool name
	PoolStatus jetstream.KeyValue // PoolStatus (the members' ledger), written by the pool controller
	PoolDemand jetstream.KeyValue // PoolDemand per scope and leaser replica, with TTLs, written by the leasers
	Quarantine jetstream.KeyValue // addresses in quarantine (events.Quarantine), with TTLs, written by the pool controller
	// Created names the buckets Open found missing and created (an upgrade added them).
	Created []string
}

// lockMarkerTTL is how long a lock's expiry marker lives, so watchers see the expiry.
const lockMarkerTTL = time.Minute

// Ensure declares the shared buckets and the event streams (create or update, so it is safe
// from every process at every start) and returns their handles.
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) (*Store, error) {
	r := max(o.Replicas, 1)
	s := &Store{JS: js}
	for _, b := range s.buckets() {
		b.cfg.Storage = jetstream.FileStorage
		b.cfg.Replicas = r
		kv, err := declare(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, b.cfg) })
		if err != nil {
			return nil, fmt.Errorf("declare bucket %s: %w", b.cfg.Bucket, err)
		}
		*b.dst = kv
	}
	leases, err := ensureLeaseShards(ctx, js, o.LeaseShards, DefaultLeaseShards(r),
		jetstream.KeyValueConfig{Storage: jetstream.FileStorage, Replicas: r})
	if err != nil {
		return nil, err
	}
	s.Leases = leases
	if err := ensureEventStreams(ctx, js, r, o.Events); err != nil {
		return nil, err
	}
	return s, nil
}

type bucket struct {
	dst *jetstream.KeyValue
	cfg jetstream.KeyValueConfig
}

// buckets is every bucket of DESIGN §3.1 with its configuration and its handle in s, but the
// lease shards (leaseshards.go).
func (s *Store) buckets() []bucket {
	return []bucket{
		{&s.Proxies, jetstream.KeyValueConfig{Bucket: events.BucketProxies, History: 5, Description: "desired proxies (ProxySpec)"}},
		{&s.CloudInit, jetstream.KeyValueConfig{Bucket: events.BucketCloudInit, History: 5, Description: "shared user-data documents"}},
		{&s.Status, jetstream.KeyValueConfig{Bucket: events.BucketStatus, History: 1, Description: "observed proxies (ProxyStatus), written by the reconciler"}},
		{&s.Catalog, jetstream.KeyValueConfig{Bucket: events.BucketCatalog, History: 1, Description: "provider catalogs"}},
		// Per-key TTLs need History 1, or the server stretches them to the marker TTL.
		{&s.Locks, jetstream.KeyValueConfig{Bucket: events.BucketLocks, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "leader, op and GC locks"}},
		{&s.Health, jetstream.KeyValueConfig{Bucket: events.BucketHealth, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "probe verdicts (ProxyHealth), each with a TTL of about three intervals"}},
		{&s.Providers, jetstream.KeyValueConfig{Bucket: events.BucketProviderHealth, History: 1, Description: "provider target checks (TargetHealth)"}},
		{&s.Probers, jetstream.KeyValueConfig{Bucket: events.BucketProbers, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "live probers (ProberMember), each with a TTL of a few seconds"}},
		{&s.Pools, jetstream.KeyValueConfig{Bucket: events.BucketPools, History: 5, Description: "desired pools (PoolSpec)"}},
		{&s.PoolStatus, jetstream.KeyValueConfig{Bucket: events.BucketPoolStatus, History: 1, Description: "pools and their members' ledger (PoolStatus), written by the pool controller"}},
		{&s.Cooldowns, jetstream.KeyValueConfig{Bucket: events.BucketCooldowns, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "cooldowns <proxy> and <proxy>.<b64url(target)> with a TTL"}},
		{&s.PoolDemand, jetstream.KeyValueConfig{Bucket: events.BucketPoolDemand, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "demand the leasers measure, <scope>.<leaser> (PoolDemand), each with a TTL of a few publish intervals"}},
		{&s.Quarantine, jetstream.KeyValueConfig{Bucket: events.BucketQuarantine, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "burned addresses in quarantine (Quarantine), each with a TTL a little past its until"}},
		{&s.LeaseState, jetstream.KeyValueConfig{Bucket: events.BucketLeaseState, History: 1, LimitMarkerTTL: lockMarkerTTL, Description: "holder slots holder.<pool>.<b64url(holder)>.<n> and sticky sessions session.<b64url(key)>, with TTLs"}},
	}
}

// Bind opens the buckets without declaring anything: what every role but the admin does
// against a shared NATS, where only the admin may create or change streams. A missing bucket
// means the installation was not set up (`egressd setup`).
func Bind(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	s := &Store{JS: js}
	for _, b := range s.buckets() {
		kv, err := js.KeyValue(ctx, b.cfg.Bucket)
		if err != nil {
			return nil, fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", b.cfg.Bucket, err)
		}
		*b.dst = kv
	}
	leases, err := OpenLeaseShards(ctx, js)
	if err != nil {
		return nil, err
	}
	s.Leases = leases
	return s, nil
}

// HostConfig is one host of a provider and its concurrency limit.
type HostConfig struct {
	Name             string
	MaxConcurrentOps int
}

// OpsAckWait is how long a provisioner may go without a heartbeat before its op is
// redelivered to another.
const OpsAckWait = 30 * time.Second

// OpsMaxAttempts bounds how often a provisioner retries one op after transient errors before
// it reports the op finished and leaves the backoff to the reconciler. The consumer itself
// redelivers without limit: a message past a consumer's MaxDeliver would stay in the work
// queue forever, and redeliveries also happen while another worker holds the op lock.
const OpsMaxAttempts = 6

// EnsureOps declares the work-queue stream of a provider and one durable pull consumer per
// host whose MaxAckPending is that host's limit: the server then holds the limit across any
// number of provisioners.
func EnsureOps(ctx context.Context, js jetstream.JetStream, provider string, hosts []HostConfig, o Options) error {
	sc := jetstream.StreamConfig{
		Name:        events.OpsStream(provider),
		Description: "ops for provider " + provider,
		Subjects:    []string{events.OpsSubjects(provider)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		Duplicates:  2 * time.Minute,
	}
	_, err := declare(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, sc) })
	if err != nil {
		return fmt.Errorf("declare stream %s: %w", events.OpsStream(provider), err)
	}
	for _, h := range hosts {
		cc := jetstream.ConsumerConfig{
			Durable:       events.HostConsumer(h.Name),
			Description:   "ops on host " + h.Name,
			FilterSubject: events.HostFilter(provider, h.Name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       OpsAckWait,
			MaxAckPending: max(h.MaxConcurrentOps, 1),
			MaxDeliver:    -1,
		}
		_, err := declare(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, events.OpsStream(provider), cc)
		})
		if err != nil {
			return fmt.Errorf("declare consumer %s on %s: %w", events.HostConsumer(h.Name), events.OpsStream(provider), err)
		}
	}
	return nil
}
