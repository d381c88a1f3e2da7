package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

func TestEnsureIsIdempotent(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	for range 2 {
		if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := kvstore.EnsureOps(ctx, js, "kvm", []kvstore.HostConfig{{Name: "h1", MaxConcurrentOps: 3}, {Name: "h2"}}, kvstore.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for host, want := range map[string]int{"h1": 3, "h2": 1} {
		c, err := js.Consumer(ctx, events.OpsStream("kvm"), events.HostConsumer(host))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.MaxAckPending; got != want {
			t.Errorf("%s MaxAckPending = %d, want %d", host, got, want)
		}
	}
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Proxies.Bucket() != "proxies" {
		t.Fatal(st.Proxies.Bucket())
	}
}

func TestCASHelpers(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ N int }
	if _, err := kvstore.GetJSON(ctx, st.Status, "k", &v); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	rev, err := kvstore.WriteJSON(ctx, st.Status, "k", map[string]int{"N": 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.WriteJSON(ctx, st.Status, "k", map[string]int{"N": 2}, 0); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("create over an existing key: %v", err)
	}
	if _, err := kvstore.UpdateJSON(ctx, st.Status, "k", map[string]int{"N": 2}, rev+100); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("update at a wrong revision: %v", err)
	}
	rev2, err := kvstore.UpdateJSON(ctx, st.Status, "k", map[string]int{"N": 3}, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.GetJSON(ctx, st.Status, "k", &v); err != nil || v.N != 3 {
		t.Fatalf("read back %v %v", v, err)
	}
	if err := kvstore.DeleteAt(ctx, st.Status, "k", rev); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("delete at a stale revision: %v", err)
	}
	if err := kvstore.DeleteAt(ctx, st.Status, "k", rev2); err != nil {
		t.Fatal(err)
	}
}

func TestLock(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second // each step has a second and more to spare on a loaded machine
	a, err := kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "a", "test", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "b", "test", ttl); !errors.Is(err, kvstore.ErrLockHeld) {
		t.Fatalf("second holder: %v", err)
	}
	// Renewing keeps the lock past its first TTL, and moves the fencing revision.
	rev := a.Revision()
	for range 4 {
		time.Sleep(ttl / 3)
		if err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.Revision() == rev {
		t.Fatal("renewal did not move the fencing revision")
	}
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "b", "test", ttl); !errors.Is(err, kvstore.ErrLockHeld) {
		t.Fatalf("renewed lock taken: %v", err)
	}
	// Without renewal it expires on the server, and the old holder cannot renew it back.
	var b *kvstore.Lock
	deadline := time.Now().Add(5 * ttl)
	for b == nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		b, _ = kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "b", "test", ttl)
	}
	if b == nil {
		t.Fatal("lock never expired")
	}
	if err := a.Renew(ctx); !errors.Is(err, kvstore.ErrLockHeld) {
		t.Fatalf("stale holder renewed: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("releasing a lost lock: %v", err)
	}
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "c", "test", ttl); !errors.Is(err, kvstore.ErrLockHeld) {
		t.Fatalf("a stale release freed b's lock: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "op.p1", "c", "test", ttl); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestCreateTTL(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second // each step has a second and more to spare on a loaded machine
	rev, err := kvstore.CreateTTL(ctx, st.Health, "p1", []byte("a"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.CreateTTL(ctx, st.Health, "p1", []byte("b"), ttl); !errors.Is(err, kvstore.ErrConflict) {
		t.Fatalf("create over a live key: %v", err)
	}
	// A PutTTL at the created revision keeps a TTL, so the key still expires.
	if _, err := kvstore.PutTTL(ctx, js, st.Health, "p1", []byte("c"), rev, ttl); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * ttl)
	for {
		_, _, err := kvstore.Get(ctx, st.Health, "p1")
		if errors.Is(err, kvstore.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key never expired: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Over the expiry marker, create succeeds again.
	if _, err := kvstore.CreateTTL(ctx, st.Health, "p1", []byte("d"), ttl); err != nil {
		t.Fatalf("create after expiry: %v", err)
	}
}

func TestLatest(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := kvstore.Latest(ctx, st.Status); err != nil || len(got) != 0 {
		t.Fatalf("empty bucket: %v %v", got, err)
	}
	for _, kv := range []struct{ k, v string }{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"c", "1"}} {
		if _, err := st.Status.Put(ctx, kv.k, []byte(kv.v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Status.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	got, err := kvstore.Latest(ctx, st.Status)
	if err != nil || len(got) != 2 || string(got["a"].Value()) != "2" || string(got["b"].Value()) != "1" {
		t.Fatalf("latest = %v %v", got, err)
	}
}

func TestKeepRenewed(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second // each step has a second and more to spare on a loaded machine
	a, err := kvstore.AcquireLock(ctx, js, st.Locks, "gc.p.h", "a", "test", ttl)
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	beats := 0
	result := make(chan error, 1)
	go func() { result <- a.KeepRenewed(kctx, ttl/3, func() { beats++ }) }()
	time.Sleep(3 * ttl)
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "gc.p.h", "b", "test", ttl); !errors.Is(err, kvstore.ErrLockHeld) {
		t.Fatalf("a kept-renewed lock was taken after three TTLs: %v", err)
	}
	// Someone removes it by force and takes it: the keeper reports the loss.
	if err := st.Locks.Purge(ctx, "gc.p.h"); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.AcquireLock(ctx, js, st.Locks, "gc.p.h", "b", "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, kvstore.ErrLockHeld) || beats == 0 {
			t.Fatalf("KeepRenewed = %v after %d beats", err, beats)
		}
	case <-time.After(5 * ttl):
		t.Fatal("KeepRenewed did not notice the loss")
	}
	cancel()
}
