package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/testcert"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/workers/gateway"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The rig's addresses: 127.0.61.1 is the origin, 127.0.61.10+i the proxies' sources.
const (
	rigNet      = "127.0.61."
	testToken   = "gwt_test_token"
	proxySecret = "SENTINEL-fleet-password"
)

// rig is an embedded NATS server with egressd's buckets, a real leaser, real forward proxies
// (with a password, the sentinel) declared Ready, and origins that record who called them.
type rig struct {
	t       testing.TB
	srv     *server.Server
	store   *kvstore.Store
	logs    *syncBuffer
	proxies []string          // names, px-0 …
	sources map[string]string // source IP → proxy name
	origin  *origin
	tlsOrig *origin
	caPool  *x509.CertPool
	obs     *recordingObserver
	// maxLeases is each proxy's maxLeases (4 unless a benchmark needs more)
	maxLeases int
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
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newRig(t testing.TB, nProxies int) *rig {
	t.Helper()
	sources := make([]string, nProxies)
	for i := range sources {
		sources[i] = rigNet + strconv.Itoa(10+i)
	}
	return newRigSources(t, sources)
}

// newRigSources starts a proxy per source ("" for one that leaves from any address: it binds
// no source port, so a benchmark's churn of connections does not take ephemeral ports from
// every other process on the machine).
func newRigSources(t testing.TB, sources []string) *rig {
	t.Helper()
	return newRigLeases(t, sources, 4)
}

// newRigLeases is newRigSources with maxLeases slots on each proxy.
func newRigLeases(t testing.TB, sources []string, maxLeases int) *rig {
	t.Helper()
	r := &rig{t: t, srv: kvstoretest.StartServer(t), logs: &syncBuffer{}, sources: map[string]string{}, obs: &recordingObserver{},
		maxLeases: maxLeases}
	_, js := kvstoretest.Connect(t, r.srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.store = store
	r.origin = startOrigin(t, nil)
	files, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(files.CA)
	r.caPool = x509.NewCertPool()
	r.caPool.AppendCertsFromPEM(pem)
	r.tlsOrig = startOrigin(t, &tls.Config{Certificates: []tls.Certificate{cert}})
	for i, src := range sources {
		r.startProxy(fmt.Sprintf("px-%d", i), src)
	}
	// The leaser starts on a declared fleet: its first view has every proxy.
	r.startLeaser()
	return r
}

func (r *rig) startLeaser() {
	nc, err := nats.Connect(r.srv.ClientURL(), nats.Name("leaser"))
	if err != nil {
		r.t.Fatal(err)
	}
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(r.store), NC: nc, Worker: "leaser-0", MinTTL: time.Second,
		Log: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case err := <-done:
		r.t.Fatalf("leaser: %v", err)
	}
	r.t.Cleanup(func() { cancel(); <-done; nc.Close() })
}

// startProxy runs a forward proxy leaving from source, with the sentinel password, and
// declares it Ready.
func (r *rig) startProxy(name, source string) {
	authFile := filepath.Join(r.t.TempDir(), "auth")
	if err := forwardproxy.WriteAuthFile(authFile, "fleet", proxySecret); err != nil {
		r.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- forwardproxy.Serve(ctx, ln, forwardproxy.Config{Source: source, AuthFile: authFile}) }()
	r.t.Cleanup(func() { cancel(); <-done })
	port := ln.Addr().(*net.TCPAddr).Port
	kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer kcancel()
	spec := map[string]any{"provider": "local", "maxLeases": r.maxLeases, "attributes": map[string]string{"geo": "de", "pool": "web"},
		"auth": map[string]string{"username": "fleet", "password": proxySecret}}
	if _, err := kvstore.PutJSON(kctx, r.store.Proxies, name, spec); err != nil {
		r.t.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local", IP: "127.0.0.1", Port: port}
	if _, err := kvstore.PutJSON(kctx, r.store.Status, name, st); err != nil {
		r.t.Fatal(err)
	}
	r.proxies = append(r.proxies, name)
	r.sources[source] = name
}

// gateway starts a gateway replica on its own NATS connection; stop ends it (as Run's owner).
func (r *rig) gateway(mod func(*gateway.Config)) (addr string, stop func()) {
	nc, err := nats.Connect(r.srv.ClientURL(), nats.Name("gateway"))
	if err != nil {
		r.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := gateway.Config{Listener: ln, Client: client.New(nc), Crawlers: []gateway.Crawler{{Name: "crawler-7", TokenSHA256: sha256.Sum256([]byte(testToken))}},
		LeaseTTL: 10 * time.Second, Observer: r.obs, Log: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Errorf("gateway: %v", err)
			}
			nc.Close()
		})
	}
	r.t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// client is an HTTP client using the gateway with user and the test token, trusting the TLS
// origin's CA.
func (r *rig) client(gw, user, token string) *http.Client {
	pu := &url.URL{Scheme: "http", Host: gw, User: url.UserPassword(user, token)}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: r.caPool}, DisableKeepAlives: true}
	r.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// held counts the leases held in KV.
func (r *rig) held() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := r.store.Leases.Held(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, c := range h {
		n += c
	}
	return n
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// origin is a web site that records the source address of each request and answers 429 to
// the sources in block.
type origin struct {
	url   string
	mu    sync.Mutex
	seen  []string
	block map[string]bool
}

func startOrigin(t testing.TB, tc *tls.Config) *origin {
	t.Helper()
	// The TLS origin listens where its certificate says (127.0.0.1); the proxies' sources
	// still tell them apart, any 127/8 address reaching any other.
	at := rigNet + "1:0"
	if tc != nil {
		at = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{block: map[string]bool{}}
	scheme := "http"
	if tc != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tc)
	}
	o.url = scheme + "://" + ln.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/bulk" {
			serveBulk(w)
			return
		}
		if req.URL.Path == "/echo" {
			b, _ := io.ReadAll(req.Body)
			fmt.Fprintf(w, "%s %s", req.Method, b)
			return
		}
		host, _, _ := net.SplitHostPort(req.RemoteAddr)
		o.mu.Lock()
		o.seen = append(o.seen, host)
		blocked := o.block[host]
		o.mu.Unlock()
		if blocked {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, "slow down")
			return
		}
		fmt.Fprintf(w, "hello %s", host)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return o
}

func (o *origin) sources() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// recordingObserver keeps what the metrics would count.
type recordingObserver struct {
	mu   sync.Mutex
	seen []string // holder/pool/kind/result
}

func (o *recordingObserver) ObserveGatewayRequest(holder, pool, kind, result string, _, _ int64, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, holder+"/"+pool+"/"+kind+"/"+result)
}

func (o *recordingObserver) ObserveGatewayHit(holder, pool, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, "hit/"+holder+"/"+pool+"/"+result)
}

func (o *recordingObserver) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.seen {
		if s == key {
			n++
		}
	}
	return n
}

// bulkBytes is what /bulk serves: the benchmark's bulk transfer.
const bulkBytes = 100 << 20

func serveBulk(w http.ResponseWriter) {
	w.Header().Set("Content-Length", strconv.Itoa(bulkBytes))
	buf := make([]byte, 64<<10)
	for sent := 0; sent < bulkBytes; sent += len(buf) {
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
}
