package reconciler

import (
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the NATS resources the reconciler uses, and no others: what its NATS user may
// touch (deploy/nats-server.conf, user reconciler). A role given the whole store could reach
// a bucket its user is denied, and fail only in a deployment with per-role users.
type Buckets struct {
	JS jetstream.JetStream // ops published, op results consumed, events published
	// Followed: the desired state, the documents and catalog it is judged with, the verdicts.
	Proxies, CloudInit, Catalog, Health jetstream.KeyValue
	Providers                           jetstream.KeyValue  // provider_health: creates wait for a failing target
	Status                              jetstream.KeyValue  // its own: the only writer
	Locks                               jetstream.KeyValue  // leader election
	Leases                              kvstore.LeaseShards // whose stream leaders it spreads
}

// BucketsOf picks the reconciler's buckets out of a store.
func BucketsOf(s *kvstore.Store) Buckets {
	return Buckets{JS: s.JS, Proxies: s.Proxies, CloudInit: s.CloudInit, Catalog: s.Catalog, Health: s.Health,
		Providers: s.Providers, Status: s.Status, Locks: s.Locks, Leases: s.Leases}
}

// complete reports whether every handle is there.
func (b Buckets) complete() bool {
	return b.JS != nil && b.Proxies != nil && b.CloudInit != nil && b.Catalog != nil && b.Health != nil &&
		b.Providers != nil && b.Status != nil && b.Locks != nil
}
