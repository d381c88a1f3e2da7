// Package flowtest drives the reconciler and provisioners together against a real embedded
// nats-server and the fake provider: the whole op path, with no role importing another.
package flowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

const installation = "inst-test"

// fastPolicy shortens every lifecycle timing so tests run in seconds.
func fastPolicy() reconciler.Policy {
	return reconciler.Policy{
		ProvisioningPoll: 200 * time.Millisecond, DriftPoll: time.Second, DeletionPoll: 200 * time.Millisecond,
		QuotaRetry: time.Second, ProvisionDeadline: 30 * time.Second, MaxDeadlines: 3,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, OpTimeout: 20 * time.Second, AddrMissLimit: 3,
	}
}

func fastTimings() provisioner.Timings {
	return provisioner.Timings{LockTTL: 3 * time.Second, Heartbeat: time.Second, CreateBudget: 30 * time.Second,
		CallBudget: 10 * time.Second, LockBusyWait: 200 * time.Millisecond, FetchWait: time.Second}
}

type harness struct {
	t     testing.TB
	srv   *server.Server
	store *kvstore.Store // the test's own connection
	ctx   context.Context
	wg    sync.WaitGroup
	// stop cancels the roles and waits for them; it runs before any connection closes, so a
	// role never ends on a closed connection (an error its Run rightly returns).
	stop func()
	log  *slog.Logger
	// tracing is the TracerProvider of the roles started from now on (nil: the global one).
	tracing trace.TracerProvider
}

func newHarness(t testing.TB) *harness {
	srv := kvstoretest.StartServer(t)
	h := &harness{t: t, srv: srv, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		h.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	h.stop = sync.OnceFunc(func() { cancel(); h.wg.Wait() })
	t.Cleanup(h.stop)
	h.store = h.connect()
	return h
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// connect opens a separate client connection, as a separate process would have.
func (h *harness) connect() *kvstore.Store {
	_, s := h.connectNC()
	return s
}

func (h *harness) connectNC() (*nats.Conn, *kvstore.Store) {
	nc, js := kvstoretest.Connect(h.t, h.srv)
	h.t.Cleanup(h.stop) // cleanups run last-in first-out: this one before nc closes
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	return nc, s
}

// provisioner starts a provisioner for the fake on its own connection.
func (h *harness) provisioner(name string, fake *providertest.Fake, worker string) {
	h.startProvisioner(provisioner.Config{Provider: name, Backend: fake, Catalog: fake.Catalog(), Worker: worker})
}

// startProvisioner starts a provisioner of cfg on its own connection, with the harness's
// installation, timings, log and tracing.
func (h *harness) startProvisioner(cfg provisioner.Config) {
	cfg.Installation, cfg.Buckets, cfg.Timings, cfg.Tracing = installation, provisioner.BucketsOf(h.connect()), fastTimings(), h.tracing
	cfg.Log = h.log.With("worker", cfg.Worker)
	p, err := provisioner.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := p.Setup(h.ctx, kvstore.Options{}); err != nil {
		h.t.Fatal(err)
	}
	h.wg.Go(func() {
		if err := p.Run(h.ctx); err != nil {
			h.t.Errorf("provisioner %s: %v", cfg.Worker, err)
		}
	})
}

// leaderTTL is the reconcilers' leader lease in these tests.
const leaderTTL = 2 * time.Second

// reconciler starts a reconciler on its own connection; cancel stops it.
func (h *harness) reconciler(holder string) (cancel func()) { return h.startReconciler(holder).stop }

// reconcilerProc is a reconciler with a connection of its own, as a process of its own.
type reconcilerProc struct {
	nc   *nats.Conn
	stop func() // cancels its Run and waits for it
}

func (h *harness) startReconciler(holder string) *reconcilerProc {
	nc, store := h.connectNC()
	r, err := reconciler.New(reconciler.Config{Buckets: reconciler.BucketsOf(store), Installation: installation, Holder: holder,
		Policy: fastPolicy(), LeaderTTL: leaderTTL, Tick: 100 * time.Millisecond, Log: h.log.With("holder", holder), Tracing: h.tracing})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, c := context.WithCancel(h.ctx)
	var done sync.WaitGroup
	done.Go(func() {
		if err := r.Run(ctx); err != nil {
			h.t.Errorf("reconciler %s: %v", holder, err)
		}
	})
	h.wg.Go(done.Wait)
	return &reconcilerProc{nc: nc, stop: func() { c(); done.Wait() }}
}

// kill ends the reconciler as kill -9 ends a process, as far as NATS can tell: its
// connection goes first, so it renews and releases nothing from then on; only then is its
// Run reaped.
func (p *reconcilerProc) kill() {
	p.nc.Close()
	p.stop()
}

// leaseChange is one message on the reconciler leader lease's subject.
type leaseChange struct {
	seq    uint64
	kind   string // "held" (a create or renewal), "released" (a delete) or "expired" (the server's TTL marker)
	holder string // of a held lease
}

// leaseLog records every change of the reconciler leader lease, in stream order, from the raw
// KV stream: its headers tell a release (KV-Operation: DEL) from an expiry the server marked
// (Nats-Marker-Reason: MaxAge), which a KV watch reports alike.
type leaseLog struct {
	mu      sync.Mutex
	changes []leaseChange
}

func (h *harness) watchLeaderLease() *leaseLog {
	h.t.Helper()
	bucket := h.store.Locks.Bucket()
	cons, err := h.store.JS.OrderedConsumer(h.ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + bucket + "." + events.LockLeaderReconciler}})
	if err != nil {
		h.t.Fatal(err)
	}
	l := &leaseLog{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		c := leaseChange{seq: meta.Sequence.Stream}
		switch {
		case m.Headers().Get("KV-Operation") == "DEL":
			c.kind = "released"
		case m.Headers().Get(jetstream.MarkerReasonHeader) == "MaxAge":
			c.kind = "expired"
		case m.Headers().Get("KV-Operation") != "" || m.Headers().Get(jetstream.MarkerReasonHeader) != "":
			c.kind = "removed otherwise: " + fmt.Sprint(m.Headers())
		default:
			var rec events.LockRecord
			_ = json.Unmarshal(m.Data(), &rec)
			c.kind, c.holder = "held", rec.Holder
		}
		l.mu.Lock()
		l.changes = append(l.changes, c)
		l.mu.Unlock()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cc.Stop(); <-cc.Closed() })
	return l
}

func (l *leaseLog) snapshot() []leaseChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.changes)
}

// waitLeader waits until holder holds the lease (its last change), after the first skip changes.
func (h *harness) waitLeader(l *leaseLog, holder string, skip int) {
	h.t.Helper()
	h.waitFor(holder+" to hold the leader lease", 30*time.Second, func() (bool, string) {
		cs := l.snapshot()
		if len(cs) <= skip {
			return false, fmt.Sprint(cs)
		}
		last := cs[len(cs)-1]
		return last.kind == "held" && last.holder == holder, fmt.Sprint(cs[skip:])
	})
}

func (h *harness) put(name, spec string) uint64 {
	h.t.Helper()
	rev, err := h.store.Proxies.Put(h.ctx, name, []byte(spec))
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

func (h *harness) del(name string) {
	h.t.Helper()
	if err := h.store.Proxies.Delete(h.ctx, name); err != nil {
		h.t.Fatal(err)
	}
}

// status reads a proxy's status; ok is false when there is none.
func (h *harness) status(name string) (events.ProxyStatus, bool) {
	var st events.ProxyStatus
	_, err := kvstore.GetJSON(h.ctx, h.store.Status, name, &st)
	if errors.Is(err, kvstore.ErrNotFound) {
		return st, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return st, true
}

// waitFor polls cond until it holds or the budget runs out.
func (h *harness) waitFor(what string, budget time.Duration, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(budget)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("timed out after %s waiting for %s; last state: %s", budget, what, last)
}

func (h *harness) waitPhase(name string, phase events.Phase) events.ProxyStatus {
	h.t.Helper()
	var st events.ProxyStatus
	h.waitFor(name+" to be "+string(phase), 30*time.Second, func() (bool, string) {
		var ok bool
		st, ok = h.status(name)
		b, _ := json.Marshal(st)
		return ok && st.Phase == phase, fmt.Sprintf("exists=%v %s", ok, b)
	})
	return st
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	h.waitFor(name+"'s status to be removed", 30*time.Second, func() (bool, string) {
		st, ok := h.status(name)
		return !ok, string(st.Phase)
	})
}

func fakeHost(limit int) providers.Host { return providers.Host{Name: "h1", MaxConcurrentOps: limit} }
