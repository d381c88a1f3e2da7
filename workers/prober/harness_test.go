package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// env is one embedded NATS server with egressd's buckets and an echo endpoint.
type env struct {
	t       testing.TB
	srv     *server.Server
	store   *kvstore.Store
	echoURL string
	logs    *syncBuffer
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := kvstoretest.StartServer(t)
	e := &env{t: t, srv: srv, logs: &syncBuffer{}}
	e.store = e.connect()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.echoURL = "http://" + ln.Addr().String() + "/"
	serve(t, func(ctx context.Context) error { return ServeEcho(ctx, ln) })
	return e
}

// connect opens another client connection and returns the store over it.
func (e *env) connect() *kvstore.Store {
	e.t.Helper()
	_, js := kvstoretest.Connect(e.t, e.srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// serve runs fn until the test ends, and checks that it returns nil promptly once cancelled.
func serve(t testing.TB, fn func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("did not return within 10s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// prober builds a prober on store (the env's own when nil) that logs into e.logs.
func (e *env) prober(store *kvstore.Store, cfg Config) *Prober {
	e.t.Helper()
	if store == nil {
		store = e.store
	}
	cfg.Buckets = BucketsOf(store)
	cfg.NC = store.JS.Conn()
	if cfg.Worker == "" {
		cfg.Worker = "prober-1"
	}
	if cfg.DefaultCheckURL == "" {
		cfg.DefaultCheckURL = e.echoURL
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// run starts p.Run until the test ends and waits until it has read the fleet.
func (e *env) run(p *Prober) (stop func()) {
	e.t.Helper()
	stop = serve(e.t, p.Run)
	select {
	case <-p.Ready():
	case <-time.After(10 * time.Second):
		e.t.Fatal("prober not ready within 10s")
	}
	return stop
}

// putStatus records proxy as Running at addr (host:port) on provider and host, as the
// reconciler would: what makes it a proxy to probe.
func (e *env) putStatus(proxy, provider, host, addr string) {
	e.t.Helper()
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		e.t.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "managed", Provider: provider, Host: host, IP: h, Port: n,
		AddressAt: time.Now().UTC()}
	if _, err := kvstore.PutJSON(context.Background(), e.store.Status, proxy, st); err != nil {
		e.t.Fatal(err)
	}
}

// spec is the JSON of a managed proxy spec with the given health check and auth.
type spec struct {
	check    map[string]any
	user     string
	password string
}

func (e *env) putSpec(proxy string, s spec) {
	e.t.Helper()
	doc := map[string]any{"v": 1, "provider": "local"}
	if s.check != nil {
		doc["healthCheck"] = s.check
	}
	if s.user != "" {
		doc["auth"] = map[string]string{"username": s.user, "password": s.password}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Proxies.Put(context.Background(), proxy, b); err != nil {
		e.t.Fatal(err)
	}
}

// request is a probe request for proxy at addr (host:port) and its subject.
func request(t *testing.T, proxy, provider, host, addr string) (string, []byte) {
	t.Helper()
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(events.ProbeRequest{V: 1, Proxy: proxy, Provider: provider, Host: host,
		Address: h, Port: p, Reason: "report", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return events.ProbeSubject(provider, host, proxy), b
}

// probeNow runs one probe of proxy at addr synchronously, with the spec in KV, as a worker
// would, and returns the record.
func (e *env) probeNow(p *Prober, proxy, addr string) events.ProxyHealth {
	e.t.Helper()
	raw, rev, err := kvstore.Get(context.Background(), e.store.Proxies, proxy)
	if err != nil {
		e.t.Fatal(err)
	}
	sp, err := schemas.ParseProxySpec(raw)
	if err != nil {
		e.t.Fatal(err)
	}
	t := &target{name: proxy, spec: probeSpecOf(sp), addr: addr}
	t.creds.SetSpec(rev, sp.Auth)
	j := p.newJob(t)
	j.known = false // read the record, as after a lost race
	p.execute(context.Background(), j)
	h, ok := e.health(proxy)
	if !ok {
		e.t.Fatalf("no health record for %s", proxy)
	}
	return h
}

func (e *env) health(proxy string) (events.ProxyHealth, bool) {
	e.t.Helper()
	var h events.ProxyHealth
	_, err := kvstore.GetJSON(context.Background(), e.store.Health, proxy, &h)
	if errors.Is(err, kvstore.ErrNotFound) {
		return h, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return h, true
}

// healthEvents returns the health events about proxy on EGRESS_EVENTS, oldest first.
func (e *env) healthEvents(proxy string) []events.Event {
	return e.eventsOn(events.EventSubject(events.KindHealth, proxy))
}

// eventsOn returns the events on EGRESS_EVENTS under subject (a filter), oldest first.
func (e *env) eventsOn(subject string) []events.Event {
	e.t.Helper()
	ctx := context.Background()
	c, err := e.store.JS.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []events.Event
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev events.Event
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				e.t.Fatal(err)
			}
			if got := m.Headers().Get(jetstream.MsgIDHeader); got != ev.ID || got == "" {
				e.t.Errorf("Nats-Msg-Id %q, event ID %q", got, ev.ID)
			}
			out = append(out, ev)
		}
		if n == 0 {
			return out
		}
	}
}

func reasons(evs []events.Event) []events.Reason {
	var out []events.Reason
	for _, ev := range evs {
		out = append(out, ev.Reason)
	}
	return out
}

// startForwardProxy runs egressd's forward proxy on addr ("127.0.0.2:0" for any port), with
// basic auth when user is set. It returns the address and a stop function.
func startForwardProxy(t testing.TB, addr, user, password string) (string, func()) {
	t.Helper()
	cfg := forwardproxy.Config{}
	if user != "" {
		cfg.AuthFile = filepath.Join(t.TempDir(), "auth")
		if err := forwardproxy.WriteAuthFile(cfg.AuthFile, user, password); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, func(ctx context.Context) error { return forwardproxy.Serve(ctx, ln, cfg) })
	return ln.Addr().String(), stop
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a log sink that tests read while probes write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
