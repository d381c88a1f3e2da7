package workers_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers"
)

// Only one of several candidates leads at a time, and when the leader's process dies
// without releasing (its connection just closes), a standby leads within about one TTL.
func TestLeaderFailover(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const ttl = 2 * time.Second
	var leading atomic.Int32
	var most atomic.Int32
	leaders := make(chan string, 10)
	type cand struct {
		name   string
		close  func()
		cancel context.CancelFunc
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(name string) cand {
		nc, js := kvstoretest.Connect(t, srv)
		st, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		l := &workers.Leader{JS: js, Locks: st.Locks, Key: "leader.test", Holder: name, TTL: ttl, Log: log}
		wg.Go(func() {
			_ = l.Run(ctx, func(ctx context.Context) error {
				n := leading.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				leaders <- name
				<-ctx.Done()
				leading.Add(-1)
				return nil
			})
		})
		return cand{name, nc.Close, cancel}
	}
	a := start("a")
	defer a.cancel()
	first := <-leaders
	b := start("b")
	defer b.cancel()
	c := start("c")
	defer c.cancel()
	time.Sleep(ttl) // standbys keep trying; none may lead
	if first != "a" || most.Load() != 1 {
		t.Fatalf("first leader %s, most concurrent leaders %d", first, most.Load())
	}
	died := time.Now()
	a.close() // the leader's connection dies: no release, the lease must expire
	select {
	case next := <-leaders:
		if next == "a" {
			t.Fatal("the dead candidate led again")
		}
		// Generous bound: expiry is at most one TTL after the last renewal, plus watch latency.
		if took := time.Since(died); took > 2*ttl {
			t.Fatalf("takeover took %s, want within about one TTL (%s)", took, ttl)
		}
	case <-time.After(4 * ttl):
		t.Fatal("no standby took over")
	}
	a.cancel()
	if most.Load() != 1 {
		t.Fatalf("%d leaders at once", most.Load())
	}
}
