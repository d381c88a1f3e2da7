package kvstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxLeaseShards bounds the shard count: one per node of the largest cluster an R5 bucket
// (the server's maximum) can live on; more shards than nodes spread nothing further.
// deploy/nats grants each role the shards up to this count.
const MaxLeaseShards = 5

// leaseShardsMeta is the metadata key of shard 0's bucket that records the shard count, so
// every role that can bind proxy_leases learns it from the bucket itself. Absent: one shard
// (an installation from before shards).
const leaseShardsMeta = "egressd_lease_shards"

// LeaseShards are the buckets lease slots are spread over: the one place that says which
// bucket holds a proxy's slots. Every writer and reader of slots goes through it.
type LeaseShards struct {
	kvs []jetstream.KeyValue
}

// Len is the number of shards.
func (s LeaseShards) Len() int { return len(s.kvs) }

// Index is the shard of proxy's slots.
func (s LeaseShards) Index(proxy string) int { return events.LeaseShard(proxy, len(s.kvs)) }

// Of is the bucket of proxy's slots.
func (s LeaseShards) Of(proxy string) jetstream.KeyValue { return s.kvs[s.Index(proxy)] }

// ForKey is the bucket of slot key <proxy>.<slot>.
func (s LeaseShards) ForKey(key string) jetstream.KeyValue {
	if proxy, _, _ := events.ParseSlotKey(key); proxy != "" {
		return s.Of(proxy)
	}
	return s.Of(key)
}

// All is every shard's bucket, shard 0 first.
func (s LeaseShards) All() []jetstream.KeyValue { return s.kvs }

// OpenLeaseShards binds the lease shards of an installation without declaring anything:
// shard 0 and the count it records, then the others. ErrBucketNotFound (wrapped) when
// shard 0 does not exist.
func OpenLeaseShards(ctx context.Context, js jetstream.JetStream) (LeaseShards, error) {
	kv0, err := js.KeyValue(ctx, events.LeaseBucket(0))
	if err != nil {
		return LeaseShards{}, fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", events.LeaseBucket(0), err)
	}
	n, err := recordedShards(ctx, kv0)
	if err != nil {
		return LeaseShards{}, err
	}
	s := LeaseShards{kvs: []jetstream.KeyValue{kv0}}
	for i := 1; i < n; i++ {
		kv, err := js.KeyValue(ctx, events.LeaseBucket(i))
		if err != nil {
			return LeaseShards{}, fmt.Errorf("bind bucket %s (%s records %d lease shards): %w", events.LeaseBucket(i), events.LeaseBucket(0), n, err)
		}
		s.kvs = append(s.kvs, kv)
	}
	return s, nil
}

// recordedShards reads the shard count from shard 0's metadata.
func recordedShards(ctx context.Context, kv0 jetstream.KeyValue) (int, error) {
	st, err := kv0.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", kv0.Bucket(), err)
	}
	v, ok := st.Metadata()[leaseShardsMeta]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLeaseShards {
		return 0, fmt.Errorf("%s: metadata %s=%q is not a shard count of 1 to %d", kv0.Bucket(), leaseShardsMeta, v, MaxLeaseShards)
	}
	return n, nil
}

// leaseShardsConfig is the configuration of shard i of n.
func leaseShardsConfig(i, n int) jetstream.KeyValueConfig {
	cfg := jetstream.KeyValueConfig{Bucket: events.LeaseBucket(i), History: 1, LimitMarkerTTL: lockMarkerTTL,
		Description: fmt.Sprintf("lease slots <proxy>.<slot> with the lease's TTL, shard %d of %d", i, n)}
	if i == 0 {
		cfg.Metadata = map[string]string{leaseShardsMeta: strconv.Itoa(n)}
	}
	return cfg
}

// ErrLeaseShardsInUse is why the shard count cannot change now: slots are held, and a proxy
// whose shard changed would be leased in its new shard beside the slots of its old one.
var ErrLeaseShardsInUse = errors.New("lease slots are held")

// ensureLeaseShards declares the shards (create or update). want 0 keeps the count already
// recorded, or takes def at the first setup. Changing the count needs empty shards; the
// shards beyond a lowered count are left as they are, unused. Shard 0, which records the
// count, is declared last, so a reader that sees the count finds every shard.
func ensureLeaseShards(ctx context.Context, js jetstream.JetStream, want, def int, base jetstream.KeyValueConfig) (LeaseShards, error) {
	if want < 0 || want > MaxLeaseShards {
		return LeaseShards{}, fmt.Errorf("lease shards: %d is not between 1 and %d", want, MaxLeaseShards)
	}
	old, err := OpenLeaseShards(ctx, js)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		want = max(cmp.Or(want, def), 1)
	case err != nil:
		return LeaseShards{}, err
	case want == 0 || want == old.Len():
		want = old.Len()
	default:
		if held, err := heldSlots(ctx, old); err != nil {
			return LeaseShards{}, err
		} else if held > 0 {
			return LeaseShards{}, fmt.Errorf("lease shards: %d recorded, %d asked: %w (%d); stop the leasers and let the leases end first",
				old.Len(), want, ErrLeaseShardsInUse, held)
		}
	}
	kvs := make([]jetstream.KeyValue, want)
	for i := want - 1; i >= 0; i-- {
		cfg := leaseShardsConfig(i, want)
		cfg.Storage, cfg.Replicas = base.Storage, base.Replicas
		kv, err := declare(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, cfg) })
		if err != nil {
			return LeaseShards{}, fmt.Errorf("declare bucket %s: %w", cfg.Bucket, err)
		}
		kvs[i] = kv
	}
	return LeaseShards{kvs: kvs}, nil
}

// leaseFilterBatch bounds the filter subjects of one listing in Held.
const leaseFilterBatch = 64

// Held counts the slots each proxy holds now, read fresh from the shards: of the proxies
// named (a filtered listing of <proxy>.* in each one's shard, so the cost is theirs, not the
// fleet's), or of every proxy when none is named. A listing may repeat a key that changes
// meanwhile; each key counts once.
func (s LeaseShards) Held(ctx context.Context, proxies ...string) (map[string]int, error) {
	out := map[string]int{}
	list := func(kv jetstream.KeyValue, filters []string) error {
		seen := map[string]bool{}
		err := eachKey(ctx, kv, filters, func(k string) {
			proxy, _, ok := events.ParseSlotKey(k)
			if !ok || seen[k] {
				return
			}
			seen[k] = true
			out[proxy]++
		})
		if err != nil {
			return fmt.Errorf("list %s: %w", kv.Bucket(), err)
		}
		return nil
	}
	if len(proxies) == 0 {
		for _, kv := range s.kvs {
			if err := list(kv, nil); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	byShard := map[int][]string{}
	for _, p := range proxies {
		byShard[s.Index(p)] = append(byShard[s.Index(p)], p+".*")
	}
	for i, filters := range byShard {
		for len(filters) > 0 {
			n := min(len(filters), leaseFilterBatch)
			if err := list(s.kvs[i], filters[:n]); err != nil {
				return nil, err
			}
			filters = filters[n:]
		}
	}
	return out, nil
}

// heldSlots counts the keys of every shard.
func heldSlots(ctx context.Context, s LeaseShards) (int, error) {
	n := 0
	for _, kv := range s.kvs {
		if err := eachKey(ctx, kv, nil, func(string) { n++ }); err != nil {
			return 0, fmt.Errorf("list %s: %w", kv.Bucket(), err)
		}
	}
	return n, nil
}
