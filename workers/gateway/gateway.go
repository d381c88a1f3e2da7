package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/internal/relay"
)

// Config configures a gateway.
type Config struct {
	Listener net.Listener   // served once Run starts; closed when it ends
	Client   *client.Client // the lease service, over NATS
	Crawlers []Crawler      // who may use it (SetCrawlers replaces them)
	// Attributes are the username keys taken as selector attributes besides "pool"
	// (default DefaultAttributes).
	Attributes []string
	Rules      *Rules // nil: DefaultRules
	// LeaseTTL is the TTL of the gateway's leases (default 60s): the client renews them at a
	// third of it while held, and a gateway killed outright leaves them for at most this long.
	LeaseTTL time.Duration
	// IdleRelease gives a lease back once nothing has used it for this long (default 30s).
	IdleRelease time.Duration
	// MaxProxiesPerRoute bounds the proxies one rotating route holds leases on (default 16).
	MaxProxiesPerRoute int
	// InfoHeaders adds X-Egressd-Proxy (and X-Egressd-Session) to answers: off by default,
	// since they tell a site watching a crawler's headers nothing, but tell the crawler which
	// proxy served it.
	InfoHeaders bool
	// AcquireTimeout bounds the wait for a lease (default 10s): longer is a 504.
	AcquireTimeout time.Duration
	// DialTimeout bounds the connection to a fleet proxy (default 10s).
	DialTimeout time.Duration
	Observer    Observer // optional: metrics
	Log         *slog.Logger
}

// DefaultAttributes are the username's attribute keys without configuration.
var DefaultAttributes = []string{"geo", "country", "region", "city", "asn"}

// Observer counts what the gateway does (metrics); *metrics.Metrics implements it. holder is
// the crawler, pool the pool its username asked for ("" for none).
type Observer interface {
	// ObserveGatewayRequest counts one request or tunnel: result is ok, blocked, failed,
	// upstream_error, refused (no proxy, a bad username) or unauthorized; bytes are those
	// relayed each way.
	ObserveGatewayRequest(holder, pool, kind, result string, in, out int64, d time.Duration)
	// ObserveGatewayHit counts one rule hit reported to the lease service (blocked or
	// failed), whether the request was then retried or answered with it.
	ObserveGatewayHit(holder, pool, result string)
}

type noObserver struct{}

func (noObserver) ObserveGatewayRequest(string, string, string, string, int64, int64, time.Duration) {
}
func (noObserver) ObserveGatewayHit(string, string, string) {}

// Gateway is the forward proxy crawlers point any HTTP client at (docs/gateway.md).
type Gateway struct {
	cfg       Config
	crawlers  crawlers
	pool      *leasePool
	transport *http.Transport
	upstreams *upstreams
	dialer    *net.Dialer
	tunnels   *relay.Tunnels
}

// New checks cfg and returns a gateway; Run serves it.
func New(cfg Config) (*Gateway, error) {
	if cfg.Listener == nil || cfg.Client == nil {
		return nil, errors.New("gateway: a listener and a lease client are required")
	}
	if cfg.Attributes == nil {
		cfg.Attributes = DefaultAttributes
	}
	for _, a := range cfg.Attributes {
		for _, r := range reservedKeys {
			if a == r {
				return nil, fmt.Errorf("gateway: attribute key %q is a reserved username key", a)
			}
		}
	}
	if cfg.Rules == nil {
		d := DefaultRules()
		cfg.Rules = &d
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Minute
	}
	if cfg.IdleRelease == 0 {
		cfg.IdleRelease = 30 * time.Second
	}
	if cfg.MaxProxiesPerRoute == 0 {
		cfg.MaxProxiesPerRoute = 16
	}
	if cfg.AcquireTimeout == 0 {
		cfg.AcquireTimeout = 10 * time.Second
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, pool: newLeasePool(cfg.Client, cfg.LeaseTTL, cfg.IdleRelease, cfg.MaxProxiesPerRoute, cfg.Log),
		dialer: &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}, tunnels: relay.NewTunnels()}
	if err := g.crawlers.set(cfg.Crawlers); err != nil {
		return nil, err
	}
	g.transport, g.upstreams = newTransport(g.dialer), newUpstreams(g.dialer)
	return g, nil
}

// SetCrawlers replaces the crawlers let in, from the next request on (a config reload).
// Tunnels already open run on.
func (g *Gateway) SetCrawlers(cs []Crawler) error { return g.crawlers.set(cs) }

// Timeouts of the serving side.
const (
	readHeaderTimeout = 30 * time.Second
	clientIdleTimeout = 2 * time.Minute
	shutdownBudget    = 5 * time.Second
)

// Run serves until ctx ends, then shuts down within a budget, cuts the tunnels and releases
// every lease the gateway holds.
func (g *Gateway) Run(ctx context.Context) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: clientIdleTimeout,
		ErrorLog: slog.NewLogLogger(g.cfg.Log.Handler(), slog.LevelDebug)}
	var wg sync.WaitGroup
	poolCtx, stopPool := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); g.pool.run(poolCtx) }()
	wg.Add(1)
	go func() { defer wg.Done(); g.upstreams.run(poolCtx) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(g.cfg.Listener) }()
	g.cfg.Log.Info("gateway serving", "addr", g.cfg.Listener.Addr().String())
	var err error
	select {
	case err = <-errc:
		err = fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		cancel()
		<-errc
	}
	g.tunnels.CloseAll()
	g.tunnels.Wait(shutdownBudget)
	g.transport.CloseIdleConnections()
	stopPool()
	wg.Wait()
	return err
}

// ServeHTTP authenticates the crawler, reads its username and serves a CONNECT or an
// absolute-form http:// request through a leased proxy.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	kind := "http"
	if r.Method == http.MethodConnect {
		kind = "connect"
	}
	user, holder, err := g.crawlers.authenticate(r.Header.Get("Proxy-Authorization"))
	if err != nil {
		g.cfg.Observer.ObserveGatewayRequest("", "", kind, "unauthorized", 0, 0, time.Since(start))
		gatewayError{status: http.StatusProxyAuthRequired, kind: psRequestDenied, detail: err.Error()}.write(w)
		return
	}
	route, err := ParseUsername(user, holder, g.cfg.Attributes)
	if err != nil {
		g.cfg.Observer.ObserveGatewayRequest(holder, "", kind, "refused", 0, 0, time.Since(start))
		gatewayError{status: http.StatusBadRequest, kind: psRequestError, detail: err.Error()}.write(w)
		return
	}
	rq := &request{holder: holder, route: route, start: start, kind: kind}
	switch {
	case r.Method == http.MethodConnect:
		g.connect(w, r, rq)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "":
		g.forward(w, r, rq)
	default:
		rq.fail(w, gatewayError{status: http.StatusBadRequest, kind: psRequestError,
			detail: "this is a forward proxy: send CONNECT host:port (https) or an absolute http:// URL"})
	}
	g.cfg.Observer.ObserveGatewayRequest(holder, route.Pool(), kind, rq.result, rq.in, rq.out, time.Since(start))
}

// request is what one request's metrics and log line say.
type request struct {
	holder  string
	route   Route
	kind    string
	start   time.Time
	result  string
	in, out int64 // bytes from the client upstream, and back
}

func (rq *request) fail(w http.ResponseWriter, e gatewayError) {
	if rq.result == "" {
		rq.result = "refused"
	}
	e.write(w)
}
