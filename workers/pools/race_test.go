package pools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// rig is an embedded nats-server with egressd's buckets and a clock the test can move.
type rig struct {
	t      testing.TB
	srv    *server.Server
	store  *kvstore.Store
	ctx    context.Context
	offset atomic.Int64 // added to the wall clock, so that a test can age members
	wg     sync.WaitGroup
	log    *slog.Logger
}

func newRig(t testing.TB) *rig {
	r := &rig{t: t, srv: kvstoretest.StartServer(t), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		r.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r.store = r.connect()
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx = ctx
	t.Cleanup(func() { cancel(); r.wg.Wait() })
	// The provider the pools name, as its provisioner publishes it: the controller creates
	// no member the reconciler would refuse.
	r.publishProvider("local", "local")
	return r
}

// publishProvider writes provider's record in provider_catalog, as its provisioner does.
func (r *rig) publishProvider(name string, hosts ...string) {
	rec := events.CatalogRecord{V: 1, Provider: name, Type: "local", UpdatedAt: time.Now()}
	for _, h := range hosts {
		rec.Hosts = append(rec.Hosts, events.CatalogHost{Name: h, MaxConcurrentOps: 4})
	}
	if _, err := kvstore.PutJSON(r.ctx, r.store.Catalog, name, rec); err != nil {
		r.t.Fatal(err)
	}
}

// connect opens a connection of its own, as another process would.
func (r *rig) connect() *kvstore.Store {
	_, js := kvstoretest.Connect(r.t, r.srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rig) now() time.Time { return time.Now().Add(time.Duration(r.offset.Load())) }

// controller starts a controller's lead loop, without the leader lease: the tests race two
// on purpose, which the lease would otherwise prevent. stop cancels it at once, which ends
// its pass wherever it is, as a kill would.
func (r *rig) controller(name string) (stop func()) {
	c, err := New(Config{Buckets: BucketsOf(r.connect()), Holder: name, Resync: 100 * time.Millisecond, Log: r.log, Now: r.now})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	var done sync.WaitGroup
	done.Go(func() {
		if err := c.lead(ctx); err != nil && ctx.Err() == nil {
			r.t.Errorf("controller %s: %v", name, err)
		}
	})
	return func() { cancel(); done.Wait() }
}

// reconcile stands in for the reconciler, whose contract with the controller is the phase in
// proxy_status: a member becomes Ready shortly after its spec appears, Draining once its spec
// says drain, and its status goes with its spec.
// rigBoot is how long every member of the rig's reconciler takes from put to Ready.
const rigBoot = 7 * time.Second

func (r *rig) reconcile() {
	s := r.connect()
	w, err := s.Proxies.WatchAll(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.wg.Go(func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				_ = s.Status.Delete(r.ctx, e.Key())
				continue
			}
			spec, err := schemas.ParseProxySpec(e.Value())
			if err != nil {
				continue
			}
			phase := events.PhaseReady
			if spec.Drain {
				phase = events.PhaseDraining
			}
			// Every instance "boots" in rigBoot: put to Ready, as the reconciler stamps it.
			now := r.now()
			_, _ = kvstore.PutJSON(r.ctx, s.Status, e.Key(), events.ProxyStatus{V: 1, Phase: phase, Mode: spec.Mode, Provider: spec.Provider,
				CreatedAt: now.Add(-rigBoot), ReadyAt: now})
		}
	})
}

// members counts the specs that name pool as owner at every change of proxies and returns
// the highest count seen so far.
func (r *rig) watchMembers(pool string) (highest func() int, current func() int) {
	w, err := r.store.Proxies.WatchAll(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var mu sync.Mutex
	owned := map[string]bool{}
	top := 0
	r.wg.Go(func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			var o ownerOnly
			mu.Lock()
			if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &o) == nil && o.Pool == pool {
				owned[e.Key()] = true
			} else {
				delete(owned, e.Key())
			}
			if len(owned) > top && len(owned) > 22 {
				st, _ := r.ledger(pool)
				in := map[string]bool{}
				for _, m := range st.Members {
					in[m.Name] = true
				}
				var extra []string
				for n := range owned {
					if !in[n] {
						extra = append(extra, n)
					}
				}
				r.t.Logf("%d owned after %s %s (rev %d): ledger %d; not in it: %v", len(owned), e.Operation(), e.Key(), e.Revision(), len(st.Members), extra)
			}
			top = max(top, len(owned))
			mu.Unlock()
		}
	})
	return func() int { mu.Lock(); defer mu.Unlock(); return top },
		func() int { mu.Lock(); defer mu.Unlock(); return len(owned) }
}

func (r *rig) putPool(name, doc string) {
	if _, err := r.store.Pools.Put(r.ctx, name, []byte(doc)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) ledger(name string) (events.PoolStatus, bool) {
	var st events.PoolStatus
	_, err := kvstore.GetJSON(r.ctx, r.store.PoolStatus, name, &st)
	return st, err == nil
}

func (r *rig) waitFor(what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled waits until the pool's ledger says Ready with want members and proxies agree.
func (r *rig) settled(pool string, want int, current func() int) {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("pool %s to settle at %d members", pool, want), func() (bool, string) {
		st, ok := r.ledger(pool)
		return ok && st.Phase == events.PoolReady && len(st.Members) == want && current() == want,
			fmt.Sprintf("phase %s, ledger %d, proxies %d (%s)", st.Phase, len(st.Members), current(), st.Message)
	})
}

// Two controllers acting on one pool at once (a stale leader beside a new one), each
// stopped and restarted at random moments in the middle of its passes, while the pool
// scales up, rotates every member and scales down: the members never outnumber the cap, and
// the pool converges.
func TestRacingControllersNeverExceedTheCap(t *testing.T) {
	r := newRig(t)
	r.reconcile()
	highest, current := r.watchMembers("web")
	const doc = `{"template":{"provider":"local"},"replicas":%d,"rotation":{"maxAgeSeconds":3600,"maxSurge":2}}`
	stops := []func(){r.controller("a"), r.controller("b")}
	rng := rand.New(rand.NewPCG(1, 2))
	chaos := make(chan struct{})
	var chaosDone sync.WaitGroup
	chaosDone.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-chaos:
				return
			case <-time.After(time.Duration(50+rng.IntN(250)) * time.Millisecond):
			}
			k := i % 2
			stops[k]()
			stops[k] = r.controller(fmt.Sprintf("%c%d", 'a'+k, i))
		}
	})
	r.putPool("web", fmt.Sprintf(doc, 20))
	r.settled("web", 20, current)
	r.offset.Store(int64(2 * time.Hour)) // every member is past its age
	r.waitFor("a full rotation", func() (bool, string) {
		st, ok := r.ledger("web")
		if !ok {
			return false, "no ledger"
		}
		old := 0
		for _, m := range st.Members {
			if m.CreatedAt.Before(time.Now().Add(time.Hour)) {
				old++
			}
		}
		return old == 0 && st.Phase == events.PoolReady, fmt.Sprintf("%d old members left, phase %s", old, st.Phase)
	})
	r.putPool("web", fmt.Sprintf(doc, 5))
	r.settled("web", 5, current)
	close(chaos)
	chaosDone.Wait()
	for _, stop := range stops {
		stop()
	}
	if top := highest(); top > 22 {
		t.Fatalf("the pool had %d members at one point; the cap is replicas 20 + maxSurge 2", top)
	}
	t.Logf("highest member count seen: %d (cap 22)", highest())
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
