package pools

import (
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the NATS resources the pool controller uses, and no others: what its NATS user
// may touch (deploy/nats-server.conf; it runs beside the reconciler, under its user).
type Buckets struct {
	JS jetstream.JetStream // pool events published, report events followed
	// Followed: the pools, the members' specs and statuses, what the providers offer.
	Pools, Status, Catalog jetstream.KeyValue
	Proxies                jetstream.KeyValue  // the members' specs, which it writes
	PoolStatus             jetstream.KeyValue  // its own: the members' ledger, the only writer
	Locks                  jetstream.KeyValue  // leader election
	Leases                 kvstore.LeaseShards // the members' held slots, counted before a drain ends
	PoolDemand             jetstream.KeyValue  // followed: the demand the leasers measure, for autoscale
	// Quarantine: burned addresses, which it writes and reads; Health: a member's observed
	// egress, read for the quarantine (quarantine.go).
	Quarantine, Health jetstream.KeyValue
}

// BucketsOf picks the pool controller's buckets out of a store.
func BucketsOf(s *kvstore.Store) Buckets {
	return Buckets{JS: s.JS, Pools: s.Pools, Status: s.Status, Catalog: s.Catalog, Proxies: s.Proxies,
		PoolStatus: s.PoolStatus, Locks: s.Locks, Leases: s.Leases, PoolDemand: s.PoolDemand,
		Quarantine: s.Quarantine, Health: s.Health}
}

// complete reports whether every handle is there.
func (b Buckets) complete() bool {
	return b.JS != nil && b.Pools != nil && b.Status != nil && b.Catalog != nil && b.Proxies != nil &&
		b.PoolStatus != nil && b.Locks != nil && b.PoolDemand != nil && b.Quarantine != nil && b.Health != nil
}
