package pools

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkPass is one steady-state pass over a settled pool of 20 members, in a fleet of 10
// and of 10,000 other proxies: what the controller pays per pool every resync. The floor is
// one KV get on the same server (BenchmarkPass/get).
//
//	go test -run '^$' -bench Pass -benchtime 200x ./workers/pools/
func BenchmarkPass(b *testing.B) {
	for _, fleet := range []int{10, 10000} {
		b.Run(fmt.Sprintf("fleet=%d", fleet), func(b *testing.B) {
			c, v, blk := settledPool(b, fleet, `{"template":{"provider":"local"},"replicas":20}`)
			ctx, cancel := context.WithCancel(context.Background())
			pub := kvstore.NewPublisher(c.cfg.Buckets.JS, c.cfg.Log, maxPendingEvents)
			var ran sync.WaitGroup
			ran.Go(func() { pub.Run(ctx) })
			b.Cleanup(func() { pub.Close(); cancel(); ran.Wait() })
			b.ResetTimer()
			for range b.N {
				if err := c.pass(ctx, v, blk, pub, "web"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("get", func(b *testing.B) {
		r := newRig(b)
		if _, err := r.store.PoolStatus.Put(context.Background(), "web", []byte(`{"v":1}`)); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, _, err := kvstore.Get(context.Background(), r.store.PoolStatus, "web"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// settledPool seeds fleet proxies of no pool and a pool of 20 (doc), lets a controller settle it,
// and returns a controller with a synced view of it all.
func settledPool(b *testing.B, fleet int, doc string) (*Controller, *view, *blocks) {
	r := newRig(b)
	ctx := context.Background()
	for i := range fleet {
		if _, err := r.store.Proxies.Put(ctx, fmt.Sprintf("other-%05d", i), []byte(`{"provider":"local"}`)); err != nil {
			b.Fatal(err)
		}
	}
	r.reconcile()
	_, current := r.watchMembers("web")
	stop := r.controller("settle")
	r.putPool("web", doc)
	r.settled("web", 20, current)
	stop()

	c, err := New(Config{Buckets: BucketsOf(r.store), Holder: "bench", Log: r.log})
	if err != nil {
		b.Fatal(err)
	}
	v := newView()
	s := r.store
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	// The catalog too: without it the pass judges the pool's provider unknown and measures an
	// Invalid pool's pass.
	watches := []struct {
		kv    jetstream.KeyValue
		apply func(jetstream.KeyValueEntry)
	}{{s.Pools, v.applyPool}, {s.PoolStatus, v.applyLedger}, {s.Proxies, v.applyProxy}, {s.Status, v.applyStatus}, {s.Catalog, v.applyCatalog}}
	synced := make(chan struct{}, len(watches))
	for _, w := range watches {
		kw, err := kvstore.WatchBucket(wctx, w.kv)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = kw.Follow(wctx, w.apply, func() { synced <- struct{}{} }) })
	}
	deadline := time.After(time.Minute)
	for range watches {
		select {
		case <-synced:
		case <-deadline:
			b.Fatal("the view did not sync")
		}
	}
	return c, v, newBlocks()
}

// BenchmarkPassQuarantine is a pass of a settled pool of 20 that recycles, in a fleet of 10:
// steady (nothing to check: the quarantine costs nothing), and while one member's egress is
// checked against the quarantine (a burned member's replacement not yet probed): the pass
// then reads address_quarantine whole and every member's probe record.
//
//	go test -run '^$' -bench PassQuarantine -benchtime 200x ./workers/pools/
func BenchmarkPassQuarantine(b *testing.B) {
	for _, checking := range []bool{false, true} {
		b.Run(fmt.Sprintf("checking=%v", checking), func(b *testing.B) {
			c, v, blk := settledPool(b, 10, `{"template":{"provider":"local"},"replicas":20,"recycle":{"blockedTargets":3}}`)
			ctx, cancel := context.WithCancel(context.Background())
			pub := kvstore.NewPublisher(c.cfg.Buckets.JS, c.cfg.Log, maxPendingEvents)
			var ran sync.WaitGroup
			ran.Go(func() { pub.Run(ctx) })
			b.Cleanup(func() { pub.Close(); cancel(); ran.Wait() })
			if checking {
				var st events.PoolStatus
				rev, err := kvstore.GetJSON(ctx, c.cfg.Buckets.PoolStatus, "web", &st)
				if err != nil {
					b.Fatal(err)
				}
				st.Members[0].QuarantineRound = 1
				if _, err := kvstore.WriteJSON(ctx, c.cfg.Buckets.PoolStatus, "web", st, rev); err != nil {
					b.Fatal(err)
				}
				// The members have addresses (the rig's statuses have none), so each one's
				// probe record is read, as in a real fleet.
				v.mu.Lock()
				for i, m := range st.Members {
					v.addrs[m.Name] = statusAddr{ip: fmt.Sprintf("127.0.62.%d", i+2), port: 3128}
				}
				v.mu.Unlock()
			}
			b.ResetTimer()
			for range b.N {
				if err := c.pass(ctx, v, blk, pub, "web"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
