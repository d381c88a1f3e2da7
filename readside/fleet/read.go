package fleet

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the handles the model reads. A nil handle reads as empty: a bucket not
// declared yet, or proxies for a reader not allowed to see specs (the viewer of deploy/nats),
// whose rows then come from the statuses alone.
type Buckets struct {
	Proxies, Status, Health jetstream.KeyValue
	Leases                  kvstore.LeaseShards // every shard is read; none reads as empty
	// Pools holds PoolSpecs, which carry a template's auth and user-data like proxies do; a
	// reader not allowed to see them gets its pools from PoolStatus alone.
	Pools, PoolStatus jetstream.KeyValue
	// PoolDemand is the demand the leasers measure; nil reads as none.
	PoolDemand jetstream.KeyValue
	// LeaseDetail also decodes every held slot, from the same read of the lease shards, into
	// Fleet.Leases (the status page's holders); without it the slots are only counted.
	LeaseDetail bool
}

// FromStore is the buckets of an open store.
func FromStore(s *kvstore.Store) Buckets {
	return Buckets{Proxies: s.Proxies, Status: s.Status, Health: s.Health, Leases: s.Leases, Pools: s.Pools, PoolStatus: s.PoolStatus, PoolDemand: s.PoolDemand}
}

// ReadError is a bucket that could not be read; its part of the model is empty.
type ReadError struct {
	Bucket string
	Err    error
}

// Error is the read's own error, which already names the bucket (kvstore.Latest).
func (e ReadError) Error() string { return e.Err.Error() }

func (e ReadError) Unwrap() error { return e.Err }

// decoded is what the buckets hold, decoded, by proxy name (leases: held slots per proxy)
// and, for pools, by pool name.
type decoded struct {
	specs    map[string]specFields
	statuses map[string]*events.ProxyStatus
	health   map[string]*events.ProxyHealth
	leases   map[string]int
	slots    []LeaseRow // with Buckets.LeaseDetail

	pools      map[string]poolFields
	poolStatus map[string]*events.PoolStatus
	demand     map[string]events.DemandSum // by scope
}

// Load reads the buckets in parallel and builds the fleet as of now. Each bucket is decoded
// in the goroutine that read it, so the decoding of 10,000 specs, statuses and health records
// spreads over the cores instead of following the reads. It always returns a fleet: a bucket
// that could not be read is in Errors and leaves its part empty, so a reader can show what it
// has beside the error.
func Load(ctx context.Context, b Buckets, now time.Time) *Fleet {
	var (
		in   decoded
		mu   sync.Mutex
		errs []ReadError
		wg   sync.WaitGroup
	)
	read := func(name string, kv jetstream.KeyValue, decode func(map[string]jetstream.KeyValueEntry)) {
		if kv == nil {
			return
		}
		wg.Go(func() {
			m, err := kvstore.Latest(ctx, kv)
			if err != nil {
				mu.Lock()
				errs = append(errs, ReadError{Bucket: name, Err: err})
				mu.Unlock()
			}
			decode(m)
		})
	}
	read(events.BucketProxies, b.Proxies, func(m map[string]jetstream.KeyValueEntry) { in.specs = decodeSpecs(m) })
	read(events.BucketStatus, b.Status, func(m map[string]jetstream.KeyValueEntry) { in.statuses = decodeAll[events.ProxyStatus](m) })
	read(events.BucketHealth, b.Health, func(m map[string]jetstream.KeyValueEntry) { in.health = decodeAll[events.ProxyHealth](m) })
	read(events.BucketPools, b.Pools, func(m map[string]jetstream.KeyValueEntry) { in.pools = decodePools(m) })
	read(events.BucketPoolStatus, b.PoolStatus, func(m map[string]jetstream.KeyValueEntry) { in.poolStatus = decodeAll[events.PoolStatus](m) })
	read(events.BucketPoolDemand, b.PoolDemand, func(m map[string]jetstream.KeyValueEntry) { in.demand = SumDemand(m) })
	in.leases = map[string]int{}
	for _, kv := range b.Leases.All() {
		// The shards hold disjoint proxies: their counts add up. A shard that fails is an
		// error of proxy_leases, the source readers judge.
		read(events.BucketLeases, kv, func(m map[string]jetstream.KeyValueEntry) {
			counts := activeLeases(m)
			var rows []LeaseRow
			if b.LeaseDetail {
				rows = leaseRows(m)
			}
			mu.Lock()
			defer mu.Unlock()
			for proxy, n := range counts {
				in.leases[proxy] += n
			}
			in.slots = append(in.slots, rows...)
		})
	}
	wg.Wait()
	// The reads finish in any order; a reader's error list should not reshuffle, and names
	// each source once.
	errs = slices.CompactFunc(slices.SortedStableFunc(slices.Values(errs), func(a, b ReadError) int { return strings.Compare(a.Bucket, b.Bucket) }),
		func(a, b ReadError) bool { return a.Bucket == b.Bucket })
	f := build(now, in)
	f.Errors = errs
	if b.LeaseDetail {
		f.Leases = newLeases(now, in.slots, errs)
	}
	return f
}

// SumDemand sums the leasers' records of pool_demand by scope (a pool's name, or a
// selector's events.SelectorScope); a record that does not decode is left out.
func SumDemand(m map[string]jetstream.KeyValueEntry) map[string]events.DemandSum {
	out := map[string]events.DemandSum{}
	for key, e := range m {
		var d events.PoolDemand
		scope := events.DemandScopeOf(key)
		if scope == "" || json.Unmarshal(e.Value(), &d) != nil || d.V != 1 {
			continue
		}
		s := out[scope]
		s.Add(d)
		out[scope] = s
	}
	return out
}

// decodeAll decodes every entry as a T; one that does not decode is left out (the bucket's
// writer is egressd itself, so that is a newer or damaged record, not user input).
func decodeAll[T any](m map[string]jetstream.KeyValueEntry) map[string]*T {
	out := make(map[string]*T, len(m))
	for key, e := range m {
		v := new(T)
		if json.Unmarshal(e.Value(), v) == nil {
			out[key] = v
		}
	}
	return out
}
