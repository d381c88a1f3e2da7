package prober

import (
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Buckets are the NATS resources a prober uses, and no others: what its NATS user may touch
// (deploy/nats-server.conf, user prober).
type Buckets struct {
	JS jetstream.JetStream // health events published
	// Followed: the specs and statuses that say what to probe, where and how.
	Proxies, Status jetstream.KeyValue
	Health          jetstream.KeyValue // the verdicts it writes (and reads back)
	Probers         jetstream.KeyValue // its presence, and the other probers'
}

// BucketsOf picks a prober's buckets out of a store.
func BucketsOf(s *kvstore.Store) Buckets {
	return Buckets{JS: s.JS, Proxies: s.Proxies, Status: s.Status, Health: s.Health, Probers: s.Probers}
}

// complete reports whether every handle is there.
func (b Buckets) complete() bool {
	return b.JS != nil && b.Proxies != nil && b.Status != nil && b.Health != nil && b.Probers != nil
}
