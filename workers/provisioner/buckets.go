package provisioner

import (
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the NATS resources a provisioner uses, and no others: what its NATS user may
// touch (deploy/nats-server.conf, user provisioner).
type Buckets struct {
	JS jetstream.JetStream // its provider's ops consumed, op results and events published
	// Read: the specs (orphan collection keeps what a proxy owns), statuses, documents.
	Proxies, Status, CloudInit jetstream.KeyValue
	Catalog                    jetstream.KeyValue // its provider's entry, which it writes
	Providers                  jetstream.KeyValue // provider_health: its checks
	Locks                      jetstream.KeyValue // op locks, collection and check rounds
	// LeaseState: its revoked.> keys only, watched (Revocations), for providers that deliver
	// revocation lists. Optional: without it no list is delivered.
	LeaseState jetstream.KeyValue
	// Quarantine: the addresses in quarantine, read for each create (quarantine.go).
	// Optional: without it nothing is in quarantine.
	Quarantine jetstream.KeyValue
}

// BucketsOf picks a provisioner's buckets out of a store.
func BucketsOf(s *kvstore.Store) Buckets {
	return Buckets{JS: s.JS, Proxies: s.Proxies, Status: s.Status, CloudInit: s.CloudInit, Catalog: s.Catalog,
		Providers: s.Providers, Locks: s.Locks, LeaseState: s.LeaseState, Quarantine: s.Quarantine}
}

// complete reports whether every handle is there.
func (b Buckets) complete() bool {
	return b.JS != nil && b.Proxies != nil && b.Status != nil && b.CloudInit != nil && b.Catalog != nil &&
		b.Providers != nil && b.Locks != nil
}
