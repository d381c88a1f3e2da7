package main

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/pools"
	"github.com/egressd/egressd/workers/prober"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"github.com/nats-io/nats.go/jetstream"
)

// The buckets each part of the role table names are all it takes (its BucketsOf): on an
// installation that has only egress_locks and the lease shards, opening with a part's names
// alone gives it every handle, so a bucket an upgrade added is made by the first role that
// uses it and no role waits on another's.
func TestRoleTableNamesEveryBucketItsPartUses(t *testing.T) {
	pick := map[string]func(*kvstore.Store) any{
		"reconciler":  func(s *kvstore.Store) any { return reconciler.BucketsOf(s) },
		"pools":       func(s *kvstore.Store) any { return pools.BucketsOf(s) },
		"provisioner": func(s *kvstore.Store) any { return provisioner.BucketsOf(s) },
		"prober":      func(s *kvstore.Store) any { return prober.BucketsOf(s) },
		"leaser":      func(s *kvstore.Store) any { return leaser.BucketsOf(s) },
	}
	kvType := reflect.TypeFor[jetstream.KeyValue]()
	for _, r := range roleTable {
		of, ok := pick[r.name]
		if !ok {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			_, _, js := kvstoretest.Start(t)
			ctx := context.Background()
			if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
				t.Fatal(err)
			}
			for _, b := range allBuckets {
				if b != events.BucketLocks {
					if err := js.DeleteKeyValue(ctx, b); err != nil {
						t.Fatal(err)
					}
				}
			}
			st, err := kvstore.Open(ctx, js, r.buckets)
			if err != nil {
				t.Fatal(err)
			}
			v := reflect.ValueOf(of(st))
			for i := range v.NumField() {
				if f := v.Field(i); f.Type() == kvType && f.IsNil() {
					t.Errorf("%s uses %s, which its entry's buckets do not name", r.name, v.Type().Field(i).Name)
				}
			}
		})
	}
	for name := range pick {
		if !slices.ContainsFunc(roleTable, func(r role) bool { return r.name == name && len(r.buckets) > 0 }) {
			t.Errorf("the role table has no buckets for %s", name)
		}
	}
}
