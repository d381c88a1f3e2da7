package leaser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rigShards is the lease shard count of every rig.
const rigShards = 3

// rig is an embedded NATS server with egressd's buckets, a client connection, and leaser
// replicas on connections of their own.
type rig struct {
	t      *testing.T
	srv    *server.Server
	nc     *nats.Conn
	store  *kvstore.Store
	cfg    func(*leaser.Config)
	logs   *syncBuffer
	mu     sync.Mutex
	events [][]byte // everything published on egress.events.>
	probes []probe
	stops  []func()
	ls     []*leaser.Leaser // the started replicas, in order
	ncs    []*nats.Conn     // their connections, in order
	killed map[int]bool     // replicas cut off from NATS (kill): their Run's error is expected
}

func newRig(t *testing.T, cfg func(*leaser.Config)) *rig {
	t.Helper()
	srv := kvstoretest.StartServer(t)
	nc, js := kvstoretest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Three lease shards on one server: every test here runs on sharded slots.
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{LeaseShards: rigShards})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, srv: srv, nc: nc, store: store, cfg: cfg, logs: &syncBuffer{}}
	for subj, f := range map[string]nats.MsgHandler{
		events.EventsSubjects: func(m *nats.Msg) { r.mu.Lock(); r.events = append(r.events, m.Data); r.mu.Unlock() },
		events.ProbeSubjects: func(m *nats.Msg) {
			p := probe{subject: m.Subject}
			_ = json.Unmarshal(m.Data, &p.ProbeRequest)
			r.mu.Lock()
			r.probes = append(r.probes, p)
			r.mu.Unlock()
		},
	} {
		sub, err := nc.Subscribe(subj, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stopLeasers)
	return r
}

type probe struct {
	subject string
	events.ProbeRequest
}

// startLeasers starts n replicas, each on its own connection, and waits until all serve.
func (r *rig) startLeasers(n int) {
	r.t.Helper()
	for range n {
		i := len(r.ls) // replicas started by an earlier call keep their numbers
		// Not kvstoretest.Connect: its cleanup would close the connection before this
		// replica is stopped.
		nc, err := nats.Connect(r.srv.ClientURL(), nats.Name(fmt.Sprintf("leaser-%d", i)))
		if err != nil {
			r.t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			r.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
		if err != nil {
			r.t.Fatal(err)
		}
		cfg := leaser.Config{Buckets: leaser.BucketsOf(store), NC: nc, Worker: fmt.Sprintf("leaser-%d", i), MinTTL: time.Second,
			Log: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		if r.cfg != nil {
			r.cfg(&cfg)
		}
		l, err := leaser.New(cfg)
		if err != nil {
			r.t.Fatal(err)
		}
		r.ls = append(r.ls, l)
		r.ncs = append(r.ncs, nc)
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		select {
		case <-l.Ready():
		case err := <-done:
			r.t.Fatalf("leaser %d ended before serving: %v", i, err)
		case <-time.After(10 * time.Second):
			r.t.Fatalf("leaser %d not serving within 10s", i)
		}
		r.stops = append(r.stops, func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !r.killed[i] {
					r.t.Errorf("leaser %d: %v", i, err)
				}
			case <-time.After(15 * time.Second):
				r.t.Errorf("leaser %d did not stop within 15s", i)
			}
			nc.Close()
		})
	}
}

// kill cuts replica i off from NATS at once, as a kill -9 of its process would: nothing it
// holds is cleaned up by it, and nothing it does reaches the server any more.
func (r *rig) kill(i int) {
	r.mu.Lock()
	if r.killed == nil {
		r.killed = map[int]bool{}
	}
	r.killed[i] = true
	r.mu.Unlock()
	r.ncs[i].Close()
	// Until the server has seen the connection go, a request may still be routed to it.
	name := fmt.Sprintf("leaser-%d", i)
	eventually(r.t, 30*time.Second, name+" gone from the server", func() bool {
		cz, err := r.srv.Connz(&server.ConnzOptions{})
		if err != nil {
			return false
		}
		for _, c := range cz.Conns {
			if c.Name == name {
				return false
			}
		}
		return true
	})
}

// stopLeasers stops every replica and waits for each Run to return.
func (r *rig) stopLeasers() {
	for _, stop := range r.stops {
		stop()
	}
	r.stops = nil
}

// proxy is a seeded proxy: spec, Ready status and health, written straight to the buckets as
// the reconciler and the probers would.
type proxy struct {
	name      string
	attrs     map[string]string
	maxLeases int
	phase     events.Phase
	latencyMs float64
	anonymity events.Anonymity // the probers' verdict on its address; "" unknown
	auth      *[2]string
	external  bool
	drain     bool
	pool      string // the owning pool (spec.pool)
}

func (r *rig) seed(ps ...proxy) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, p := range ps {
		spec := map[string]any{"provider": "local", "maxLeases": p.maxLeases}
		mode := "managed"
		if p.external {
			mode = "external"
			spec = map[string]any{"mode": "external", "endpoint": map[string]any{"host": "10.9.9.9", "port": 8080}, "maxLeases": p.maxLeases}
		}
		if p.attrs != nil {
			spec["attributes"] = p.attrs
		}
		if p.drain {
			spec["drain"] = true
		}
		if p.pool != "" {
			spec["pool"] = p.pool
		}
		if p.auth != nil {
			spec["auth"] = map[string]string{"username": p.auth[0], "password": p.auth[1]}
		}
		if _, err := kvstore.PutJSON(ctx, r.store.Proxies, p.name, spec); err != nil {
			r.t.Fatal(err)
		}
		phase := p.phase
		if phase == "" {
			phase = events.PhaseReady
		}
		st := events.ProxyStatus{V: 1, Phase: phase, Mode: mode, Provider: "local", Host: "local",
			IP: "127.0.0." + strconv.Itoa(10+i), Port: 3128}
		if p.external {
			st.Provider, st.Host, st.IP, st.Port = "", "", "10.9.9.9", 8080
		}
		if _, err := kvstore.PutJSON(ctx, r.store.Status, p.name, st); err != nil {
			r.t.Fatal(err)
		}
		if p.latencyMs > 0 || p.anonymity != "" {
			h := events.ProxyHealth{V: 1, Proxy: p.name, Healthy: true, LatencyMs: p.latencyMs,
				Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Anonymity: p.anonymity}
			if _, err := kvstore.PutJSON(ctx, r.store.Health, p.name, h); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// reply is a decoded answer of the lease service.
type reply struct {
	code   events.ErrorCode // 0 on success
	header string
	body   []byte
	err    events.ErrorDetail
}

func (r *rig) call(subject string, req any) reply {
	r.t.Helper()
	data, ok := req.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(req); err != nil {
			r.t.Fatal(err)
		}
	}
	m, err := r.nc.Request(subject, data, 10*time.Second)
	if err != nil {
		r.t.Fatalf("request %s: %v", subject, err)
	}
	return decodeReply(r.t, m)
}

func decodeReply(t testing.TB, m *nats.Msg) reply {
	rep := reply{body: m.Data}
	if c := m.Header.Get("Nats-Service-Error-Code"); c != "" {
		n, _ := strconv.Atoi(c)
		rep.code = events.ErrorCode(n)
		rep.header = m.Header.Get("Nats-Service-Error")
		var er events.ErrorReply
		if err := json.Unmarshal(m.Data, &er); err != nil {
			t.Errorf("error body %q: %v", m.Data, err)
		}
		rep.err = er.Error
		if er.Error.Code != rep.code {
			t.Errorf("body code %d, header code %d", er.Error.Code, rep.code)
		}
	}
	return rep
}

func (r *rig) acquire(req events.AcquireRequest) (events.LeaseGrant, reply) {
	r.t.Helper()
	rep := r.call(events.LeaseAcquireSubject, req)
	var lr events.LeaseReply
	if rep.code == 0 {
		if err := json.Unmarshal(rep.body, &lr); err != nil {
			r.t.Fatal(err)
		}
	}
	return lr.Lease, rep
}

// mustAcquire acquires or fails the test.
func (r *rig) mustAcquire(req events.AcquireRequest) events.LeaseGrant {
	r.t.Helper()
	g, rep := r.acquire(req)
	if rep.code != 0 {
		r.t.Fatalf("acquire %+v: %d %s", req, rep.code, rep.err.Message)
	}
	return g
}

func (r *rig) release(id string) bool {
	r.t.Helper()
	rep := r.call(events.LeaseReleaseSubject, events.ReleaseRequest{ID: id})
	if rep.code != 0 {
		r.t.Fatalf("release %s: %d %s", id, rep.code, rep.err.Message)
	}
	var rr events.ReleaseReply
	if err := json.Unmarshal(rep.body, &rr); err != nil {
		r.t.Fatal(err)
	}
	return rr.Released
}

// keys counts the live keys of a bucket.
func (r *rig) keys(kv jetstream.KeyValue) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := kv.ListKeys(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for range l.Keys() {
		n++
	}
	return n
}

// eventually polls cond every 50ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seenEvents returns the decoded events seen so far (core NATS copies, duplicates included).
func (r *rig) seenEvents() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, b := range r.events {
		var ev events.Event
		if err := json.Unmarshal(b, &ev); err == nil {
			out = append(out, ev)
		}
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// slots counts the keys of every lease shard.
func (r *rig) slots() int {
	r.t.Helper()
	n := 0
	for _, kv := range r.store.Leases.All() {
		n += r.keys(kv)
	}
	return n
}
