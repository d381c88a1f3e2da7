package kvstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// seen is what a follower recorded: each applied entry as "key=value" or "key removed", and
// the point at which the initial values were in.
type seen struct {
	mu     sync.Mutex
	log    []string
	synced chan struct{}
}

func (s *seen) apply(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		s.log = append(s.log, e.Key()+"="+string(e.Value()))
	} else {
		s.log = append(s.log, e.Key()+" removed")
	}
}

func (s *seen) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// waitFor waits until the log holds want (in order, at its end), or fails after a budget
// that only bounds a stuck run.
func (s *seen) waitFor(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.snapshot()
		if len(got) >= len(want) && slices.Equal(got[len(got)-len(want):], want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("followed %q, want it to end with %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Follow gives the initial values, then the marker, then every change: a put, a delete, a
// purge and a per-key TTL's expiry, each removal as a removal. It returns nil once its
// context ends, and stops its watch.
func TestFollowMirrorsABucket(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mirror", LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	w, err := kvstore.WatchBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{synced: make(chan struct{})}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Follow(fctx, s.apply, func() { close(s.synced) }) }()
	select {
	case <-s.synced:
	case <-ctx.Done():
		t.Fatal("the initial values never ended")
	}
	if got := s.snapshot(); !slices.Equal(got, []string{"a=1", "b=1"}) {
		t.Fatalf("initial values %q, want a=1 and b=1 before the marker", got)
	}
	if !w.Synced() {
		t.Error("Synced is false after the marker")
	}
	steps := []struct {
		do   func() error
		want string
	}{
		{func() error { _, err := kv.Put(ctx, "a", []byte("2")); return err }, "a=2"},
		{func() error { return kv.Delete(ctx, "a") }, "a removed"},
		{func() error { return kv.Purge(ctx, "b") }, "b removed"},
		{func() error { _, err := kv.Create(ctx, "c", []byte("3"), jetstream.KeyTTL(time.Second)); return err }, "c=3"},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, st.want)
	}
	s.waitFor(t, "c=3", "c removed") // the server's marker when c's TTL ran out
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Follow after its context ended: %v, want nil", err)
	}
	if err := w.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// A watch whose connection closes under a follower that still wants it ends with
// ErrWatchEnded, naming the bucket; SyncInitial on a closed watch says the same.
func TestFollowSaysWhenTheWatchEnds(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	nc, js := kvstoretest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ends"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kvstore.WatchBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- w.Follow(ctx, func(jetstream.KeyValueEntry) {}, func() { close(synced) }) }()
	<-synced
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, kvstore.ErrWatchEnded) || !strings.Contains(err.Error(), "ends") {
			t.Fatalf("Follow on a closed connection: %v, want ErrWatchEnded naming the bucket", err)
		}
	case <-ctx.Done():
		t.Fatal("Follow did not return after its connection closed")
	}
	if _, err := w.Take(nil, false); !errors.Is(err, kvstore.ErrWatchEnded) {
		t.Errorf("Take of a closed channel: %v, want ErrWatchEnded", err)
	}
}

// WatchKeys follows only the keys its filters match, and SyncInitial returns once their
// initial values are applied.
func TestWatchKeysFilters(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "filtered"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x.1", "y.1", "x.2"} {
		if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	filters := []string{"x.>"}
	w, err := kvstore.WatchKeys(ctx, kv, filters)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	s := &seen{}
	if err := w.SyncInitial(ctx, s.apply); err != nil {
		t.Fatal(err)
	}
	if got := s.snapshot(); !slices.Equal(got, []string{"x.1=v", "x.2=v"}) {
		t.Errorf("initial values %q, want only the x keys", got)
	}
	if filters[0] != "x.>" {
		t.Errorf("the caller's filters changed to %q", filters)
	}
}
