package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

// The provider lock hook holds across processes (two hooks, two connections): holders of one
// key never overlap, and a held lock outlives its TTL while it is renewed.
func TestProviderLockHook(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	hooks := make([]*providerHooks, 2)
	for i := range hooks {
		_, js := kvstoretest.Connect(t, srv)
		store, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hooks[i] = &providerHooks{ttl: 2 * time.Second}
		hooks[i].connect(store, []string{"a", "b"}[i], discardLogger())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			release, err := hooks[i%2].lock(ctx, "image.kvm.h1.debian")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(300 * time.Millisecond)
			inside.Add(-1)
			release()
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders at once", most.Load())
	}
	// Held past its TTL by renewal: a second holder must wait.
	release, err := hooks[0].lock(ctx, "image.kvm.h1.long")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := hooks[1].lock(short, "image.kvm.h1.long"); err == nil {
		t.Fatal("a renewed lock was taken after its TTL")
	}
	release()
	if r, err := hooks[1].lock(ctx, "image.kvm.h1.long"); err != nil {
		t.Fatal(err)
	} else {
		r()
	}
}
