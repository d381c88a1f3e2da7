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
