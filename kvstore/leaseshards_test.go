package kvstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// The shard count is chosen at the first setup, recorded in shard 0, kept by later setups
// that do not name one, read back by every binder, and changed only while no slot is held.
func TestLeaseShardsCountIsRecordedAndKept(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	names := func(s kvstore.LeaseShards) string {
		var out []string
		for _, kv := range s.All() {
			out = append(out, kv.Bucket())
		}
		return strings.Join(out, " ")
	}
	steps := []struct {
		name  string
		opts  kvstore.Options
		want  string // buckets, or the error's text
		isErr error
	}{
		{"first setup takes the count asked", kvstore.Options{LeaseShards: 3}, "proxy_leases proxy_leases_1 proxy_leases_2", nil},
		{"a setup naming none keeps it", kvstore.Options{Replicas: 1}, "proxy_leases proxy_leases_1 proxy_leases_2", nil},
		{"out of range", kvstore.Options{LeaseShards: kvstore.MaxLeaseShards + 1}, "lease shards: 6 is not between 1 and 5", nil},
		{"no change while a slot is held", kvstore.Options{LeaseShards: 2}, "", kvstore.ErrLeaseShardsInUse},
	}
	for i, st := range steps {
		if i == 3 {
			shards, err := kvstore.OpenLeaseShards(ctx, js)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kvstore.CreateTTL(ctx, shards.Of("px-1"), "px-1.0", []byte(`{}`), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		s, err := kvstore.Ensure(ctx, js, st.opts)
		switch {
		case st.isErr != nil:
			if !errors.Is(err, st.isErr) {
				t.Errorf("%s: %v, want %v", st.name, err, st.isErr)
			}
		case err != nil:
			if err.Error() != st.want {
				t.Errorf("%s: %v", st.name, err)
			}
		case names(s.Leases) != st.want:
			t.Errorf("%s: %s, want %s", st.name, names(s.Leases), st.want)
		}
	}
	bound, err := kvstore.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if names(bound.Leases) != "proxy_leases proxy_leases_1 proxy_leases_2" {
		t.Fatalf("bound %s", names(bound.Leases))
	}
	// Once the slot is gone the count may change; each proxy's shard is its hash's.
	if err := bound.Leases.Of("px-1").Delete(ctx, "px-1.0"); err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.Ensure(ctx, js, kvstore.Options{LeaseShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s.Leases.Len() != 2 || s.Leases.Of("px-1").Bucket() != events.LeaseBucket(events.LeaseShard("px-1", 2)) {
		t.Fatalf("%s; px-1 in %s", names(s.Leases), s.Leases.Of("px-1").Bucket())
	}
}

// An installation from before shards has one proxy_leases without a recorded count: it keeps
// working as one shard, through a setup that names no count too.
func TestLeaseShardsOfAnOlderInstallation(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketLeases, History: 1, LimitMarkerTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []kvstore.Options{{}, {Replicas: 1}} {
		s, err := kvstore.Ensure(ctx, js, o)
		if err != nil {
			t.Fatal(err)
		}
		if s.Leases.Len() != 1 || s.Leases.Of("anything").Bucket() != events.BucketLeases {
			t.Fatalf("%d shards", s.Leases.Len())
		}
	}
}

// A delete with a note reads as absent, carries the note to watchers, and is a CAS.
func TestDeleteNoted(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	s, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv := s.Leases.Of("p")
	rev, err := kvstore.CreateTTL(ctx, kv, "p.0", []byte(`{"v":1}`), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := kvstore.DeleteNoted(ctx, js, kv, "p.0", rev+1, []byte("why")); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("at a wrong revision: %v", err)
	}
	if err := kvstore.DeleteNoted(ctx, js, kv, "p.0", rev, []byte("why")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kvstore.Get(ctx, kv, "p.0"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("after the delete: %v", err)
	}
	w, err := kv.Watch(ctx, "p.0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kvstore.StopWatch(w) }()
	e := <-w.Updates()
	if e == nil || e.Operation() != jetstream.KeyValueDelete || string(e.Value()) != "why" {
		t.Fatalf("watch delivered %+v", e)
	}
	if _, err := kvstore.CreateTTL(ctx, kv, "p.0", []byte(`{"v":1}`), time.Minute); err != nil {
		t.Fatalf("create after the noted delete: %v", err)
	}
}
