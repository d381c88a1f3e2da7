package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// service is an embedded NATS server with one Ready proxy (maxLeases 1, so a second holder
// shows whether the first still holds it) and a lease service whose minimum TTL is 1s.
type service struct {
	srv   *server.Server
	store *kvstore.Store
	tune  func(*leaser.Config)
	stop  func()
}

func startService(t *testing.T) (*service, *client.Client) {
	t.Helper()
	return startServiceWith(t, nil)
}

// startServiceWith is startService with a change to the leaser's config.
func startServiceWith(t *testing.T, tune func(*leaser.Config)) (*service, *client.Client) {
	t.Helper()
	srv := kvstoretest.StartServer(t)
	nc, js := kvstoretest.Connect(t, srv)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := kvstore.PutJSON(ctx, store.Proxies, "px-1", map[string]any{"provider": "local", "maxLeases": one}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.PutJSON(ctx, store.Status, "px-1", events.ProxyStatus{V: 1, Phase: events.PhaseReady,
		Provider: "local", Host: "local", IP: "127.0.0.10", Port: 3128}); err != nil {
		t.Fatal(err)
	}
	s := &service{srv: srv, store: store, tune: tune}
	s.start(t)
	t.Cleanup(func() { s.stop() })
	return s, client.New(nc)
}

// nc is a new client connection to the service's server.
func (s *service) nc(t *testing.T) *nats.Conn {
	t.Helper()
	nc, _ := kvstoretest.Connect(t, s.srv)
	return nc
}

func (s *service) start(t *testing.T) {
	t.Helper()
	nc, err := nats.Connect(s.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg := leaser.Config{Buckets: leaser.BucketsOf(s.store), NC: nc, MinTTL: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if s.tune != nil {
		s.tune(&cfg)
	}
	l, err := leaser.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("lease service not ready")
	}
	s.stop = func() { cancel(); <-done; nc.Close(); s.stop = func() {} }
}

func TestLeaseAutoRenewKeepsItBeyondItsTTL(t *testing.T) {
	_, c := startService(t)
	ctx := context.Background()
	// A 2 s TTL: renewed every 667 ms, each renewal with as long again to be retried before
	// the lease would end, which a loaded machine's stalls fit in.
	l, err := c.Acquire(ctx, client.AcquireOptions{TTL: 2 * time.Second, Holder: "crawler-1"})
	if err != nil {
		t.Fatal(err)
	}
	first := l.ExpiresAt()
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	case <-time.After(5 * time.Second): // two and a half TTLs
	}
	if _, err := c.AcquireOnce(ctx, client.AcquireOptions{TTL: time.Second}); !errors.Is(err, client.ErrNoProxy) {
		t.Fatalf("second holder while the lease is renewed: %v", err)
	}
	if !l.ExpiresAt().After(first) {
		t.Fatal("ExpiresAt did not move")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := c.AcquireOnce(ctx, client.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	if g.ID == l.ID {
		t.Fatal("same ID for a new grant")
	}
	select {
	case <-l.Lost():
		t.Fatal("Release closed Lost")
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

// Lost fires when the slot is taken over: here an operator removes the key and another
// holder is granted the slot before the next renewal (2 s after the grant: a third of the TTL).
func TestLeaseLostFiresWhenTheSlotIsTakenOver(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, client.AcquireOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := kvstore.DeleteAt(ctx, s.store.Leases.Of("px-1"), "px-1.0", 0); err != nil {
		t.Fatal(err)
	}
	var other events.LeaseGrant
	deadline := time.Now().Add(5 * time.Second)
	for other.ID == "" && time.Now().Before(deadline) {
		other, _ = c.AcquireOnce(ctx, client.AcquireOptions{TTL: 60 * time.Second})
	}
	if other.ID == "" || other.ID == l.ID {
		t.Fatalf("the slot was not granted again: %q", other.ID)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the slot changed hands")
	}
	if !errors.Is(l.Err(), client.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	// Releasing the lost lease must not remove the new holder's.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, other.ID, 0); err != nil {
		t.Fatalf("the new holder's lease: %v", err)
	}
}

// With the service gone for a whole TTL, the lease counts as lost on the client's clock.
func TestLeaseLostFiresWhenRenewalsFailForATTL(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, client.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s.stop()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed")
	}
	if !errors.Is(l.Err(), client.ErrExpired) || !errors.Is(l.Err(), nats.ErrNoResponders) {
		t.Fatalf("Err = %v", l.Err())
	}
}

func TestLeaseTypedErrors(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	_, err := c.AcquireOnce(ctx, client.AcquireOptions{Selector: map[string]string{"geo": "mars"}})
	var se *client.Error
	if !errors.Is(err, client.ErrNoProxy) || !errors.As(err, &se) || se.Availability == nil || se.Availability.Matched != 0 {
		t.Fatalf("no match: %v", err)
	}
	_, err = c.AcquireOnce(ctx, client.AcquireOptions{TTL: 2 * time.Hour})
	if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &se) || se.Field != "ttlSeconds" || errors.Is(err, client.ErrNoProxy) {
		t.Fatalf("TTL too long: %v", err)
	}
	_, err = c.AcquireOnce(ctx, client.AcquireOptions{MinAnonymity: "high"})
	if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &se) || se.Field != "minAnonymity" {
		t.Fatalf("minAnonymity high: %v", err)
	}
	// No proxy of the service is judged yet: minAnonymity reaches it, and the 503 says so.
	_, err = c.AcquireOnce(ctx, client.AcquireOptions{MinAnonymity: events.AnonymityElite})
	if !errors.Is(err, client.ErrNoProxy) || !errors.As(err, &se) || se.Availability.BelowAnonymity == 0 || se.Availability.BelowAnonymity != se.Availability.Ready {
		t.Fatalf("minAnonymity elite on unjudged proxies: %v %+v", err, se.Availability)
	}
	if _, err := c.Renew(ctx, "px-1.0.0123456789abcdef", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown lease: %v", err)
	}
	l, err := c.Acquire(ctx, client.AcquireOptions{Target: "a.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Report(ctx, client.Blocked, ""); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("blocked without a target: %v", err)
	}
	r, err := l.Report(ctx, client.Blocked, "a.example", client.WithCooldown(time.Minute), client.AndRelease())
	if err != nil || !r.Released || time.Until(r.CooldownUntil) < 50*time.Second {
		t.Fatalf("report: %+v %v", r, err)
	}
	if _, err := c.AcquireOnce(ctx, client.AcquireOptions{Target: "a.example"}); !errors.Is(err, client.ErrNoProxy) {
		t.Fatalf("acquire for the blocked target: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.stop()
	// Tried again until the context ends (retry.go); the last try's error is returned.
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.AcquireOnce(sctx, client.AcquireOptions{}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no service: %v", err)
	}
}

// A strict session that cannot have its proxy and a holder at its limit get typed errors
// that say why.
func TestLeaseSessionAndHolderCapErrors(t *testing.T) {
	s, c := startServiceWith(t, func(cfg *leaser.Config) { cfg.MaxPerHolder = 1 })
	ctx := context.Background()
	// A second proxy with room, that a selector names, so that only the holder's limit stands
	// in the way.
	if _, err := kvstore.PutJSON(ctx, s.store.Proxies, "px-2", map[string]any{"provider": "local", "maxLeases": 5,
		"attributes": map[string]string{"room": "yes"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstore.PutJSON(ctx, s.store.Status, "px-2", events.ProxyStatus{V: 1, Phase: events.PhaseReady,
		Provider: "local", Host: "local", IP: "127.0.0.11", Port: 3128}); err != nil {
		t.Fatal(err)
	}
	// px-1 before px-2 by name, all else equal.
	strict := client.AcquireOptions{Holder: "a", Sticky: "s42", Session: time.Minute, StickyMode: events.StickyStrict}
	l, err := c.Acquire(ctx, strict)
	if err != nil || l.Proxy != "px-1" {
		t.Fatalf("strict session: %v %v", l, err)
	}
	defer l.Release(ctx)
	var se *client.Error
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = c.AcquireOnce(ctx, client.AcquireOptions{Holder: "a", Selector: map[string]string{"room": "yes"}, Strategy: events.StrategyRoundRobin})
		if !errors.Is(err, client.ErrNoProxy) || time.Now().After(deadline) {
			break // a 503 only until the leaser's view has px-2
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, client.ErrHolderCap) || !errors.As(err, &se) || se.Limit != 1 || se.Reason != events.ErrorHolderAtCap {
		t.Fatalf("second lease of a holder capped at 1: %v", err)
	}
	strict.Holder = "b"
	_, err = c.AcquireOnce(ctx, strict)
	if !errors.Is(err, client.ErrNoProxy) || !errors.As(err, &se) || se.Reason != events.ErrorSessionUnavailable ||
		se.Session == nil || se.Session.Proxy != "px-1" || se.Session.Cause != events.SessionProxyAtCapacity {
		t.Fatalf("strict session on a full proxy: %v %+v", err, se)
	}
}

// A lease whose proxy is deleted is ended by the service: the holder's next renewal is
// refused, Lost fires, and Err says why with the typed end.
func TestLeaseLostFiresWhenItsProxyIsDeleted(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, client.AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := s.store.Proxies.Delete(ctx, "px-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the proxy was deleted")
	}
	var se *client.Error
	if !errors.Is(l.Err(), client.ErrEnded) || !errors.As(l.Err(), &se) || se.End != events.ReasonProxyDeleted {
		t.Fatalf("Err = %v, want ErrEnded with End %s", l.Err(), events.ReasonProxyDeleted)
	}
}

// An acquire with Wait is held until the holder before it releases, and then granted; one
// whose wait is in vain gets ErrNoProxy with the wait's detail. The call's own deadline, shorter
// than the wait, is what the service goes by: it answers before the caller stops listening.
func TestAcquireWaits(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	first, err := c.Acquire(ctx, client.AcquireOptions{Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, client.AcquireOptions{Holder: "b", Wait: 30 * time.Second})
		got <- result{l, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("answered while the only slot was held: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiting acquire: %v", r.err)
	}
	defer r.l.Release(ctx)

	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.AcquireOnce(dctx, client.AcquireOptions{Holder: "c", Wait: 30 * time.Second})
	var se *client.Error
	if !errors.Is(err, client.ErrNoProxy) || !errors.As(err, &se) || se.Wait == nil || se.Wait.Cause != events.WaitTimedOut {
		t.Fatalf("a wait longer than the call's deadline: %v, want ErrNoProxy with the wait", err)
	}

	// The request timeout grows by the wait: a client whose requests time out after 500 ms
	// still waits most of its 3 s (all but the margin for the answer), and is told so.
	short := client.New(s.nc(t), client.WithRequestTimeout(500*time.Millisecond))
	_, err = short.AcquireOnce(ctx, client.AcquireOptions{Holder: "d", Wait: 3 * time.Second})
	if !errors.As(err, &se) || se.Wait == nil || se.Wait.WaitedSeconds < 2 {
		t.Fatalf("a 3s wait with a 500ms request timeout: %v (wait %+v)", err, se.Wait)
	}
}
