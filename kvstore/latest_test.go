package kvstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// Latest returns every key while writers rewrite keys as fast as they can: a watcher's
// initial values alone can miss a key rewritten during them.
func TestLatestUnderChurn(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "churn", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("x"))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		_, js2 := kvstoretest.Connect(t, srv)
		kv2, _ := js2.KeyValue(ctx, "churn")
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				kv2.Put(ctx, fmt.Sprintf("k%d", r.IntN(n)), []byte("y"))
			}
		})
	}
	misses := 0
	for range 30 {
		m, err := kvstore.Latest(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != n {
			misses++
			t.Logf("got %d of %d", len(m), n)
		}
	}
	close(stop)
	wg.Wait()
	if misses > 0 {
		t.Errorf("%d of 30 reads incomplete", misses)
	}
}

// A bucket whose newest message was removed out of order (an expired key's marker expired in
// turn) leaves the watch nothing to deliver up to the stream's last sequence: Latest returns
// what there is rather than wait for its context. A bucket without per-key TTLs, where every
// message up to it comes, is read whole (TestLatestUnderChurn's kind of read).
func TestLatestAfterTheNewestMessageExpired(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ttl", History: 1, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "stays", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "goes", []byte("y"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	// The key expires, its marker is written and expires too: one message is left, and the
	// stream's last sequence names one that no longer exists.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
		if info.State.Msgs == 1 && info.State.LastSeq > 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key and its marker did not expire: %+v", info.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := kvstore.Latest(rctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || m["stays"] == nil {
		t.Fatalf("got %d keys, want only stays", len(m))
	}
}
