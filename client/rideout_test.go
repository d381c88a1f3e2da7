package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replicas are leaser replicas, each on a connection of its own to a server of its own
// choosing, that a test stops, kills and starts while crawlers use the service.
type replicas struct {
	t     *testing.T
	store *kvstore.Store
	mu    sync.Mutex
	stops map[int]func(kill bool)
}

// seedFleet writes n Ready proxies with slots each.
func seedFleet(t *testing.T, store *kvstore.Store, n, slots int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		name := fmt.Sprintf("px-%d", i)
		if _, err := kvstore.PutJSON(ctx, store.Proxies, name, map[string]any{"provider": "local", "maxLeases": slots}); err != nil {
			t.Fatal(err)
		}
		if _, err := kvstore.PutJSON(ctx, store.Status, name, events.ProxyStatus{V: 1, Phase: events.PhaseReady,
			Provider: "local", Host: "local", IP: fmt.Sprintf("127.0.53.%d", 10+i), Port: 3128}); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs replica i connected to url and waits until it serves.
func (rs *replicas) start(i int, url string) {
	t := rs.t
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("leaser-%d", i)), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(store), NC: nc, Worker: fmt.Sprintf("leaser-%d", i),
		MinTTL: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case err := <-done:
		t.Fatalf("leaser %d ended before serving: %v", i, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("leaser %d not serving within 30s", i)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.stops[i] = func(kill bool) {
		if kill { // as kill -9: gone from NATS at once, nothing cleaned up
			nc.Close()
		}
		cancel()
		if err := <-done; err != nil && !kill {
			t.Errorf("leaser %d: %v", i, err)
		}
		nc.Close()
	}
}

// stop stops (or kills) replica i.
func (rs *replicas) stop(i int, kill bool) {
	rs.mu.Lock()
	stop := rs.stops[i]
	delete(rs.stops, i)
	rs.mu.Unlock()
	if stop != nil {
		stop(kill)
	}
}

func (rs *replicas) stopAll() {
	for i := range 16 {
		rs.stop(i, false)
	}
}

// crawl runs n crawlers, each acquiring, reporting and releasing in a loop on a client of
// its own, until stop; it counts their cycles and every error a call returned.
type crawl struct {
	cycles, errs atomic.Int64
	mu           sync.Mutex
	first        []error
	wg           sync.WaitGroup
	cancel       context.CancelFunc
}

func startCrawl(t *testing.T, n int, connect func(i int) *nats.Conn, opts ...client.Option) *crawl {
	ctx, cancel := context.WithCancel(context.Background())
	cr := &crawl{cancel: cancel}
	fail := func(what string, err error) {
		cr.errs.Add(1)
		cr.mu.Lock()
		if len(cr.first) < 10 {
			cr.first = append(cr.first, fmt.Errorf("%s: %w", what, err))
		}
		cr.mu.Unlock()
	}
	for i := range n {
		c := client.New(connect(i), opts...)
		cr.wg.Go(func() {
			for ctx.Err() == nil {
				// Each call runs to its end, unhurried by the test's stop: an error is an error.
				l, err := c.Acquire(context.Background(), client.AcquireOptions{TTL: time.Minute, Holder: fmt.Sprintf("c%d", i)})
				if err != nil {
					fail("acquire", err)
					continue
				}
				if _, err := l.Report(context.Background(), client.OK, "example.com"); err != nil {
					fail("report", err)
				}
				if err := l.Release(context.Background()); err != nil {
					fail("release", err)
				}
				cr.cycles.Add(1)
			}
		})
	}
	return cr
}

// stopAndCount stops the crawlers and returns their errors.
func (cr *crawl) stopAndCount() (int64, []error) {
	cr.cancel()
	cr.wg.Wait()
	return cr.errs.Load(), cr.first
}

// after waits until the crawlers have done n more cycles.
func (cr *crawl) after(t *testing.T, n int64, what string) {
	t.Helper()
	want := cr.cycles.Load() + n
	if !within(60*time.Second, 10*time.Millisecond, func() bool { return cr.cycles.Load() >= want }) {
		cr.mu.Lock()
		first := errors.Join(cr.first...)
		cr.mu.Unlock()
		t.Fatalf("%s: fewer than %d cycles within 60s (%d errors; the first: %v)", what, n, cr.errs.Load(), first)
	}
}

// heldSlots counts the lease slots held in every shard.
func heldSlots(t *testing.T, store *kvstore.Store) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for _, kv := range store.Leases.All() {
		l, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range l.Keys() {
			n++
		}
	}
	return n
}

// checkRideOut stops the crawlers and checks that no call returned an error and that every
// lease was released: a try whose reply was lost left no second lease behind.
func checkRideOut(t *testing.T, cr *crawl, store *kvstore.Store) {
	t.Helper()
	n, first := cr.stopAndCount()
	t.Logf("%d cycles, %d caller-visible errors", cr.cycles.Load(), n)
	if n != 0 {
		t.Fatalf("%d caller-visible errors, want 0; the first: %v", n, errors.Join(first...))
	}
	if !within(30*time.Second, 50*time.Millisecond, func() bool { return heldSlots(t, store) == 0 }) {
		t.Fatalf("%d slots still held after every crawler released its leases (a second lease of a retried acquire?)", heldSlots(t, store))
	}
}

// Issue 31 item 2: eight crawlers acquire, report and release through the Go client while
// the leaser replicas are stopped and started one by one, one is killed (its connection
// gone at once, mid-request or not), and then every replica is down until the crawlers'
// tries have found nobody several times: no call returns an error, and no lease is left
// held.
func TestClientRidesOutLeaserRestarts(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	store, err := kvstore.Ensure(context.Background(), js, kvstore.Options{LeaseShards: 3})
	if err != nil {
		t.Fatal(err)
	}
	seedFleet(t, store, 4, 4)
	rs := &replicas{t: t, store: store, stops: map[int]func(bool){}}
	t.Cleanup(rs.stopAll)
	url := srv.ClientURL()
	rs.start(0, url)
	rs.start(1, url)
	cr := startCrawl(t, 8, func(int) *nats.Conn { nc, _ := kvstoretest.Connect(t, srv); return nc }, client.WithRequestTimeout(2*time.Second))
	cr.after(t, 50, "before the restarts")
	for i := range 2 { // a rolling restart
		rs.stop(i, false)
		cr.after(t, 20, "with one replica")
		rs.start(i, url)
	}
	rs.stop(0, true) // a crash
	cr.after(t, 20, "after a replica's crash")
	rs.start(2, url)
	rs.stop(1, false) // every replica down
	rs.stop(2, false)
	noService(t, srv)
	rs.start(3, url)
	rs.start(4, url)
	cr.after(t, 50, "after the outage")
	checkRideOut(t, cr, store)
}

// noService waits until a request finds no lease service, then a little longer than the
// client's first backoffs, as measured by further requests finding none.
func noService(t *testing.T, srv *server.Server) {
	t.Helper()
	nc, _ := kvstoretest.Connect(t, srv)
	misses := 0
	if !within(30*time.Second, 50*time.Millisecond, func() bool {
		_, err := nc.Request(events.LeaseAcquireSubject, []byte(`{"probe":true}`), time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			misses++
		}
		return misses >= 5
	}) {
		t.Fatal("the lease service still answered 30s after every replica stopped")
	}
}
