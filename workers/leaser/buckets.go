package leaser

import (
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the NATS resources a leaser uses, and no others: what its NATS user may touch
// (deploy/nats-server.conf, user leaser).
type Buckets struct {
	JS jetstream.JetStream // lease and report events, statistics published
	// Followed: what may be leased (specs, statuses, verdicts) and the pools' holder caps.
	Proxies, Status, Health, Pools jetstream.KeyValue
	Leases                         kvstore.LeaseShards // its own: the lease slots
	Cooldowns                      jetstream.KeyValue  // its own: cooldowns
	LeaseState                     jetstream.KeyValue  // its own: holder slots and sessions
	PoolDemand                     jetstream.KeyValue  // its own records: the demand it measures (demand.go)
}

// BucketsOf picks a leaser's buckets out of a store.
func BucketsOf(s *kvstore.Store) Buckets {
	return Buckets{JS: s.JS, Proxies: s.Proxies, Status: s.Status, Health: s.Health, Pools: s.Pools,
		Leases: s.Leases, Cooldowns: s.Cooldowns, LeaseState: s.LeaseState, PoolDemand: s.PoolDemand}
}

// complete reports whether every handle is there.
func (b Buckets) complete() bool {
	return b.JS != nil && b.Proxies != nil && b.Status != nil && b.Health != nil && b.Pools != nil &&
		b.Leases.Len() > 0 && b.Cooldowns != nil && b.LeaseState != nil && b.PoolDemand != nil
}
