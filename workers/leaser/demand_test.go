package leaser_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
)

// demandOf sums the pool_demand records of scope, as the pool controller does.
func (r *rig) demandOf(scope string) events.DemandSum {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := kvstore.Latest(ctx, r.store.PoolDemand)
	if err != nil {
		r.t.Fatal(err)
	}
	var s events.DemandSum
	for key, e := range m {
		var d events.PoolDemand
		if events.DemandScopeOf(key) == scope && json.Unmarshal(e.Value(), &d) == nil {
			s.Add(d)
		}
	}
	return s
}

// The leasers record demand per pool a selector can match, even an empty one: refusals (a
// holder once however often it retries, and no more once it is granted), grants and held slots;
// a selector that matches no pool gets a scope of its own; the records fade with their TTL.
func TestDemandRecordedPerPool(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.DemandInterval = time.Second; c.DemandWindow = 30 * time.Second })
	ctx := context.Background()
	for _, p := range []struct{ name, doc string }{
		{"web", `{"template":{"provider":"local","attributes":{"geo":"de"}},"autoscale":{"min":0,"max":3}}`},
		{"empty", `{"template":{"provider":"local","attributes":{"geo":"us"}},"replicas":0}`},
	} {
		if _, err := r.store.Pools.Put(ctx, p.name, []byte(p.doc)); err != nil {
			t.Fatal(err)
		}
	}
	r.seed(proxy{name: "web-aaaaa", pool: "web", attrs: map[string]string{"geo": "de", "pool": "web"}, maxLeases: 1})
	r.startLeasers(1)
	g := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"pool": "web"}, Holder: "c1"})
	// Refused: the one member is taken. c2 retries three times and counts once; two acquires
	// without a holder count twice; geo=us matches only the empty pool.
	for range 3 {
		if _, rep := r.acquire(events.AcquireRequest{Selector: map[string]string{"geo": "de"}, Holder: "c2"}); rep.code != events.CodeUnavailable {
			t.Fatalf("want 503, got %+v", rep)
		}
	}
	for range 2 {
		r.acquire(events.AcquireRequest{Selector: map[string]string{"pool": "web"}})
	}
	r.acquire(events.AcquireRequest{Selector: map[string]string{"geo": "us"}, Holder: "c3"})
	r.acquire(events.AcquireRequest{Selector: map[string]string{"tier": "none"}, Holder: "c4"})
	eventually(t, 10*time.Second, "web's demand recorded", func() bool {
		d := r.demandOf("web")
		return d.Refused == 3 && d.Granted == 1 && d.Held == 1
	})
	eventually(t, 10*time.Second, "the empty pool's and the lone selector's demand recorded", func() bool {
		return r.demandOf("empty").Refused == 1 && r.demandOf(events.SelectorScope(map[string]string{"tier": "none"})).Refused == 1
	})
	if d := r.demandOf("web"); d.GrantsPerSecond <= 0 || d.Waiting != 0 {
		t.Fatalf("web: %+v", d)
	}
	// Waiting counts while an acquire waits (the waits of issue 23 item 1 call it).
	done := r.ls[0].Waiting(map[string]string{"geo": "de"})
	eventually(t, 10*time.Second, "a waiter counted", func() bool { return r.demandOf("web").Waiting == 1 })
	done()
	done()
	eventually(t, 10*time.Second, "the waiter gone", func() bool { return r.demandOf("web").Waiting == 0 })
	if !r.release(g.ID) {
		t.Fatal("release")
	}
	// c2 is served at last: its refusal is answered, no longer demand on top of its lease.
	g2 := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"geo": "de"}, Holder: "c2"})
	eventually(t, 10*time.Second, "c2's refusal answered by its grant", func() bool {
		d := r.demandOf("web")
		return d.Refused == 2 && d.Granted == 2 && d.Held == 1
	})
	if !r.release(g2.ID) {
		t.Fatal("release")
	}
	// A replica that stops writes no more: its records fade with their TTL.
	r.stopLeasers()
	eventually(t, 20*time.Second, "the records expired", func() bool { return r.keys(r.store.PoolDemand) == 0 })
}

// The first acquire waiting on a pool is written to pool_demand at once, not at the writer's
// next interval: the pool controller grows a pool at zero members as soon as someone waits
// (with fast-booting members the interval was most of the wait: docs/performance.md).
func TestFirstWaiterWrittenAtOnce(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.DemandInterval = 10 * time.Minute })
	if _, err := r.store.Pools.Put(context.Background(), "web", []byte(`{"template":{"provider":"local"},"autoscale":{"min":0,"max":1}}`)); err != nil {
		t.Fatal(err)
	}
	r.startLeasers(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		data, _ := json.Marshal(events.AcquireRequest{Selector: map[string]string{"pool": "web"}, WaitSeconds: 30})
		_, _ = r.nc.RequestWithContext(ctx, events.LeaseAcquireSubject, data)
	}()
	eventually(t, 30*time.Second, "the waiter in pool_demand long before the 10 min interval", func() bool { return r.demandOf("web").Waiting == 1 })
}
