package provisioner_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runRig runs a provisioner whose op stream the test declares itself, host by host.
type runRig struct {
	t       *testing.T
	nc      *nats.Conn
	store   *kvstore.Store
	fake    *providertest.Fake
	logs    chan slog.Record
	results chan events.OpResult
	done    chan error // Run's error, once it has returned
	stop    context.CancelFunc
}

// newRunRig declares the op stream with the consumers of the declared hosts only, then
// starts Run for hosts (all of the fake's catalog when nil).
func newRunRig(t *testing.T, hosts []string, declared ...string) *runRig {
	_, nc, js := kvstoretest.Start(t)
	store, err := kvstore.Ensure(t.Context(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &runRig{t: t, nc: nc, store: store, logs: make(chan slog.Record, 256), results: collectResults(t, nc),
		done: make(chan error, 1),
		fake: providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2}, providers.Host{Name: "h2", MaxConcurrentOps: 1})}
	r.declare(declared...)
	p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: r.fake, Catalog: r.fake.Catalog(), Hosts: hosts,
		Installation: "inst", Worker: "w1", Buckets: provisioner.BucketsOf(store), Log: slog.New(recorder{r.logs}), Timings: testTimings})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		r.returned("cancelled")
	})
	return r
}

func (r *runRig) declare(hosts ...string) {
	r.t.Helper()
	var hc []kvstore.HostConfig
	for _, h := range hosts {
		hc = append(hc, kvstore.HostConfig{Name: h, MaxConcurrentOps: 2})
	}
	if err := kvstore.EnsureOps(r.t.Context(), r.store.JS, "fake", hc, kvstore.Options{}); err != nil {
		r.t.Fatal(err)
	}
}

// returned waits for Run's error; Run not returning is the failure this guards against.
func (r *runRig) returned(after string) error {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // later callers (the cleanup) see it too
		return err
	case <-time.After(30 * time.Second):
		r.t.Fatalf("Run did not return after it was %s", after)
		return nil
	}
}

func (r *runRig) running() bool {
	select {
	case err := <-r.done:
		r.done <- err
		return false
	default:
		return true
	}
}

// create publishes a create op for proxy on host and returns its result.
func (r *runRig) create(proxy, host string) events.OpResult {
	r.t.Helper()
	spec := `{"provider":"fake"}`
	if _, err := r.store.Proxies.Put(r.t.Context(), proxy, []byte(spec)); err != nil {
		r.t.Fatal(err)
	}
	s, err := schemas.ParseProxySpec([]byte(spec))
	if err != nil {
		r.t.Fatal(err)
	}
	op := events.Op{V: 1, ID: "op-" + proxy, Kind: events.OpCreate, Proxy: proxy, Provider: "fake", Host: host, UID: "uid-" + proxy,
		InstanceName: providers.InstanceName("inst", "uid-"+proxy), SpecHash: s.Hash(nil), IssuedAt: time.Now()}
	b, _ := json.Marshal(op)
	if _, err := r.store.JS.Publish(r.t.Context(), events.OpSubject("fake", host, proxy), b); err != nil {
		r.t.Fatal(err)
	}
	select {
	case res := <-r.results:
		return res
	case <-time.After(30 * time.Second):
		r.t.Fatalf("no result of the create of %s on %s", proxy, host)
		return events.OpResult{}
	}
}

// waitLog returns the first record with msg containing want and the attribute host=host.
func (r *runRig) waitLog(want, host string) slog.Record {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case rec := <-r.logs:
			if strings.Contains(rec.Message, want) && attr(rec, "host") == host {
				return rec
			}
		case <-deadline:
			r.t.Fatalf("no log %q for host %s", want, host)
			return slog.Record{}
		}
	}
}

// A host whose consumer is not declared yet does not hold up the rest: the bound host
// serves its ops, the unbound one is retried (and says so) until it is declared, then serves
// too; Run never returns on its own.
func TestUnboundHostIsRetriedWhileTheOthersServe(t *testing.T) {
	r := newRunRig(t, nil, "h1")
	if res := r.create("p1", "h1"); res.ErrorClass != "" || res.Host != "h1" {
		t.Fatalf("create on the bound host: %+v", res)
	}
	first := r.waitLog("host consumer not bound", "h2")
	if !strings.Contains(attr(first, "err"), "consumer not found") {
		t.Fatalf("the retry log names %q, want the bind error", attr(first, "err"))
	}
	r.waitLog("host consumer not bound", "h2") // retried, not given up
	if !r.running() {
		t.Fatalf("Run returned while a host waited for its consumer: %v", r.returned("running"))
	}
	r.declare("h1", "h2")
	if res := r.create("p2", "h2"); res.ErrorClass != "" || res.Host != "h2" {
		t.Fatalf("create on the host bound late: %+v", res)
	}
	r.stop()
	if err := r.returned("cancelled"); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
}

// A bind error no retry can fix ends Run even while another host's fetchers run: the rest is
// cancelled and the error names the host.
func TestPermanentBindErrorEndsRun(t *testing.T) {
	r := newRunRig(t, []string{"h1", "bad.host"}, "h1")
	err := r.returned("given a host NATS refuses as a consumer name")
	if !errors.Is(err, jetstream.ErrInvalidConsumerName) || !strings.Contains(err.Error(), "host bad.host") {
		t.Fatalf("Run = %v, want the bind error of host bad.host", err)
	}
}

// A connection closed under a running provisioner ends Run with the error, naming the host
// whose fetchers found it: nothing can run on it again.
func TestClosedConnectionEndsRun(t *testing.T) {
	r := newRunRig(t, []string{"h1"}, "h1")
	if res := r.create("p1", "h1"); res.ErrorClass != "" {
		t.Fatalf("create: %+v", res)
	}
	r.nc.Close()
	err := r.returned("left on a closed connection")
	if !errors.Is(err, nats.ErrConnectionClosed) || !strings.Contains(err.Error(), "host h1") {
		t.Fatalf("Run = %v, want the closed connection, naming host h1", err)
	}
}

// recorder is a slog handler that hands every record to the test.
type recorder struct{ ch chan<- slog.Record }

func (recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h recorder) Handle(_ context.Context, rec slog.Record) error {
	select {
	case h.ch <- rec.Clone():
	default: // the test reads what it needs; the rest may go
	}
	return nil
}
func (h recorder) WithAttrs(as []slog.Attr) slog.Handler { return attrsHandler{h, as} }
func (h recorder) WithGroup(string) slog.Handler         { return h }

type attrsHandler struct {
	recorder
	as []slog.Attr
}

func (h attrsHandler) Handle(ctx context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(h.as...)
	return h.recorder.Handle(ctx, rec)
}
func (h attrsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return attrsHandler{h.recorder, append(append([]slog.Attr{}, h.as...), as...)}
}

func attr(rec slog.Record, key string) string {
	v := ""
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}
