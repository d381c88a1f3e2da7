// Package forwardproxy is the HTTP forward proxy that the local provider runs as one process
// per instance: CONNECT tunnelling, plain HTTP forwarding of absolute-form requests, optional
// basic auth from a file that can be rotated in place, and an optional outbound source address.
//
// The proxy never reveals that it is one: it adds no Via or X-Forwarded-For header and strips
// Proxy-Authorization before forwarding, so the sites a crawler visits see only the egress IP.
package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/internal/relay"
)

// Config configures a forward proxy.
type Config struct {
	Listen   string // address the listener was opened on; informational (logs)
	Source   string // optional outbound source IP
	AuthFile string // optional basic-auth file (see WriteAuthFile); rotation is picked up live
	// RevocationsFile is an optional lease revocation list (WriteRevocationsFile), re-read
	// when it changes: the lease tokens it names are refused, and their tunnels closed.
	RevocationsFile string
	// RefusalsFile, optional, is where the proxy keeps its counts of refused credentials by
	// reason (Refusals), for the local provider's metrics.
	RefusalsFile string
	Logger       *slog.Logger // nil discards
}

// Timeouts. Variables rather than constants so that tests can shorten them.
var (
	dialTimeout       = 10 * time.Second
	responseTimeout   = 60 * time.Second // upstream response headers
	tunnelIdleTimeout = 5 * time.Minute  // a CONNECT tunnel with no bytes either way
	readHeaderTimeout = 30 * time.Second // client request headers
	clientIdleTimeout = 2 * time.Minute  // keep-alive between client requests
	shutdownBudget    = 3 * time.Second  // graceful shutdown before connections are cut
	hijackedWait      = 500 * time.Millisecond
)

// Serve runs the proxy on ln until ctx is done, then shuts down gracefully within a short
// budget and returns nil. Any other error from the listener is returned.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	h, err := newHandler(cfg)
	if err != nil {
		return err
	}
	defer h.transport.CloseIdleConnections()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       clientIdleTimeout,
		// The standard library's error log would print client noise (TLS probes, resets) with
		// no level; at Debug it is still there for whoever looks.
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var counting sync.WaitGroup
	countCtx, stopCounting := context.WithCancel(context.Background())
	if h.auth != nil && cfg.RefusalsFile != "" {
		counting.Go(func() { h.writeRefusals(countCtx, cfg.RefusalsFile) })
	}
	// The counts are written a last time after the server has stopped.
	defer func() { stopCounting(); counting.Wait() }()

	select {
	case err := <-errc:
		h.tunnels.CloseAll()
		return fmt.Errorf("forward proxy: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Out of budget: requests still in flight are cut.
		srv.Close()
	}
	// Shutdown does not track hijacked connections: tunnels are cut here, and their handlers
	// get a moment to log and return.
	h.tunnels.CloseAll()
	h.tunnels.Wait(hijackedWait)
	<-errc
	if h.auth != nil {
		h.log.Info("credentials refused since the start, by reason", "refused", h.auth.Refused())
	}
	return nil
}

type handler struct {
	log        *slog.Logger
	auth       *FileAuthenticator // nil: no auth
	dialer     *net.Dialer        // its Timeout bounds every upstream dial
	transport  *http.Transport
	tunnelIdle time.Duration

	tunnels *relay.Tunnels // the hijacked CONNECT tunnels, cut at shutdown
}

func newHandler(cfg Config) (*handler, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if cfg.Source != "" {
		ip, err := netip.ParseAddr(cfg.Source)
		if err != nil {
			return nil, fmt.Errorf("forward proxy: source: %w", err)
		}
		// With an IPv4 local address the dialer only tries the target's IPv4 addresses, so a
		// dual-stack name still leaves from the source.
		d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
	}
	h := &handler{
		log:        log,
		dialer:     d,
		tunnelIdle: tunnelIdleTimeout,
		tunnels:    relay.NewTunnels(),
		transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			ResponseHeaderTimeout: responseTimeout,
			// Compression stays end to end: the transport must not add Accept-Encoding and
			// then decode the body behind the client's back.
			DisableCompression:  true,
			MaxIdleConns:        100,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	if cfg.AuthFile != "" {
		h.auth = NewFileAuthenticator(cfg.AuthFile, log).WithRevocations(cfg.RevocationsFile)
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &record{method: r.Method, host: r.Host}
	defer func() {
		h.log.Debug("request", "method", rec.method, "host", rec.host, "status", rec.status,
			"bytes", rec.bytes, "duration", time.Since(start).Round(time.Microsecond), "refused", rec.refused)
	}()

	var g grant
	if h.auth != nil {
		var err error
		if g, err = h.auth.checkHeader(r.Header.Get("Proxy-Authorization")); err != nil {
			// The reason goes to the log line, never the credential; the client learns only 407.
			rec.refused = leaseauth.Reason(err)
			w.Header().Set("Proxy-Authenticate", `Basic realm="egressd"`)
			rec.fail(w, http.StatusProxyAuthRequired, "proxy authentication required")
			return
		}
	}
	switch {
	case r.Method == http.MethodConnect:
		h.connect(w, r, rec, g)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "":
		h.forward(w, r, rec)
	default:
		// Origin-form requests would make the proxy a web server for itself, and https://
		// absolute-form would make it terminate TLS for the client; neither is its job.
		rec.fail(w, http.StatusBadRequest, "this is a forward proxy: send CONNECT or an absolute http:// URL")
	}
}

// record is what the one log line of a request says.
type record struct {
	method  string
	host    string
	status  int
	bytes   int64
	refused string // why its credentials were refused (leaseauth.Reason)
}

func (rec *record) fail(w http.ResponseWriter, status int, msg string) {
	rec.status = status
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	n, _ := io.WriteString(w, msg+"\n")
	rec.bytes += int64(n)
}

// upstreamStatus maps a failure to reach the upstream to 504 for timeouts and 502 otherwise.
func upstreamStatus(err error) int {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}
