package leaser

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
)

// HTTPPathPrefix is where the HTTP face serves the endpoints: POST /v1/leases/acquire, …
const HTTPPathPrefix = "/v1/leases/"

// DefaultHTTPMaxBody bounds a request body of the HTTP face. Every field of a request has a
// length limit (a selector of 32 pairs of 256 bytes is the largest), so real requests are far
// below it.
const DefaultHTTPMaxBody = 64 << 10

// HTTPConfig turns on the HTTP face of the lease service (docs/leases.md): the four endpoints
// as JSON over HTTP, for crawlers without a NATS client, with the same handlers, limits and
// errors as the micro service. Every request needs the bearer token of one of Crawlers.
type HTTPConfig struct {
	Listener     net.Listener // the leaser serves on it once its view is complete, and closes it
	TLS          *tls.Config  // nil serves plain HTTP (the caller decides where that is fine)
	Crawlers     []Crawler
	MaxBodyBytes int64 // default DefaultHTTPMaxBody
}

// Crawler is one bearer token of the HTTP face. Only its SHA-256 is kept: the tokens are
// random and long (egressd lease token makes 256 bits), so a fast hash is as safe at rest as a
// slow one, and it costs nothing per request, where bcrypt would cost each request tens of
// milliseconds of CPU that an unauthenticated caller could make us spend.
type Crawler struct {
	Name        string   // the holder of every lease it acquires
	TokenSHA256 [32]byte // SHA-256 of the token
}

// TokenHash is the hash a Crawler keeps of token.
func TokenHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }

func (c *HTTPConfig) check() error {
	if c.Listener == nil {
		return errors.New("leaser: HTTP: a listener is required")
	}
	if len(c.Crawlers) == 0 {
		return errors.New("leaser: HTTP: at least one crawler token is required")
	}
	if err := checkCrawlers(c.Crawlers); err != nil {
		return err
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultHTTPMaxBody
	}
	return nil
}

func checkCrawlers(crawlers []Crawler) error {
	names, hashes := map[string]bool{}, map[[32]byte]bool{}
	for i, cr := range crawlers {
		switch {
		case cr.Name == "" || len(cr.Name) > maxStringLen:
			return fmt.Errorf("leaser: HTTP: crawler %d: the name must be 1 to %d bytes", i, maxStringLen)
		case names[cr.Name]:
			return fmt.Errorf("leaser: HTTP: crawler %q appears twice", cr.Name)
		case hashes[cr.TokenSHA256]:
			return fmt.Errorf("leaser: HTTP: crawler %q has the token hash of another crawler", cr.Name)
		case cr.TokenSHA256 == [32]byte{}:
			return fmt.Errorf("leaser: HTTP: crawler %q has no token hash", cr.Name)
		}
		names[cr.Name], hashes[cr.TokenSHA256] = true, true
	}
	return nil
}

// SetHTTPCrawlers replaces the crawlers the HTTP face lets in, from the next request on:
// `egressd run` calls it when its config is reloaded (SIGHUP), so a crawler is added, or a
// leaked token revoked, without a restart. An empty list lets nobody in. Leases already
// granted are not touched: they are renewed and released by ID, and the ID is the holder's.
func (l *Leaser) SetHTTPCrawlers(crawlers []Crawler) error {
	if l.cfg.HTTP == nil {
		return errors.New("leaser: HTTP: the face is not configured")
	}
	if err := checkCrawlers(crawlers); err != nil {
		return err
	}
	cs := slices.Clone(crawlers)
	l.crawlers.Store(&cs)
	return nil
}

// httpFace serves the endpoints over HTTP: ctx is the leaser's own (a caller that hangs up
// does not cut a request short, just as over NATS).
type httpFace struct {
	l         *Leaser
	ctx       context.Context
	endpoints map[string]func(context.Context, []byte) (any, error)
}

// startHTTP serves the HTTP face, if configured, until the returned stop, which shuts it
// down gracefully within ShutdownBudget. A failure of the server goes to failed.
func (l *Leaser) startHTTP(ctx context.Context, wg *sync.WaitGroup, failed chan<- error) (stop func()) {
	hc := l.cfg.HTTP
	if hc == nil {
		return func() {}
	}
	face := &httpFace{l: l, ctx: ctx, endpoints: map[string]func(context.Context, []byte) (any, error){
		"acquire": l.acquire, "renew": l.renew, "release": l.release, "report": l.report,
	}}
	srv := &http.Server{
		Handler: face,
		// Budgets: a slow or stalled client holds a connection only this long.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      l.cfg.RequestBudget + 10*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(l.log.Handler(), slog.LevelWarn),
	}
	ln := hc.Listener
	scheme := "http"
	if hc.TLS != nil {
		ln, scheme = tls.NewListener(ln, hc.TLS), "https"
	}
	l.log.Info("lease HTTP face started", "url", scheme+"://"+hc.Listener.Addr().String()+HTTPPathPrefix, "crawlers", len(hc.Crawlers))
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			select {
			case failed <- fmt.Errorf("lease HTTP face: %w", err):
			default:
			}
		}
	})
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), l.cfg.ShutdownBudget)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			l.log.Warn("lease HTTP face: requests still running at shutdown", "err", err)
			_ = srv.Close()
		}
	}
}

// ServeHTTP authenticates first, so a caller without a token learns nothing, not even which
// paths exist; then it runs the endpoint's handler on the body and answers as NATS would,
// with the error code as the status.
func (f *httpFace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, _ := strings.CutPrefix(r.URL.Path, HTTPPathPrefix)
	h := f.endpoints[name]
	crawler, aerr := f.authenticate(r)
	if aerr != nil {
		if h != nil {
			f.l.cfg.Observer.ObserveLease(name, "unauthorized", 0)
		}
		w.Header().Set("WWW-Authenticate", aerr.challenge)
		f.writeError(w, name, aerr.apiError)
		return
	}
	switch {
	case h == nil:
		f.writeError(w, name, &apiError{code: events.CodeNotFound,
			msg: fmt.Sprintf("no endpoint at %s: POST %s{acquire,renew,release,report}", truncate(r.URL.Path, 80), HTTPPathPrefix)})
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		f.writeError(w, name, &apiError{code: events.CodeMethodNotAllowed, msg: fmt.Sprintf("%s takes POST, not %s", r.URL.Path, truncate(r.Method, 16))})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.l.cfg.HTTP.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			f.writeError(w, name, &apiError{code: events.CodeTooLarge, field: "(document)",
				msg: fmt.Sprintf("the request body is over %d bytes", tooLarge.Limit)})
		} else {
			f.writeError(w, name, badRequest("(document)", "reading the request body: %v", err))
		}
		return
	}
	ctx, end := f.l.startCall(withCaller(f.ctx, crawler), name, traceHeaders(r.Header))
	if name == "acquire" {
		body, err = withHolder(body, crawler)
	}
	var reply any
	if err == nil {
		reply, err = h(ctx, body)
	}
	defer end(err) // after the reply, as over NATS
	if err != nil {
		f.writeError(w, name, err)
		return
	}
	b, err := json.Marshal(reply)
	if err != nil {
		f.writeError(w, name, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// traceHeaders are the W3C trace context headers of an HTTP request under the names the
// tracing carrier looks up, as written on NATS: HTTP canonicalises them ("Traceparent"). Only
// these two go on: the others (Authorization) have no business in tracing.
func traceHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, name := range []string{"traceparent", "tracestate"} {
		if v := h.Values(name); len(v) > 0 {
			out[name] = v
		}
	}
	return out
}

// authError is a refused token and its WWW-Authenticate challenge (RFC 6750).
type authError struct {
	*apiError
	challenge string
}

// authenticate finds the crawler whose token the request carries. Every configured hash is
// compared, in constant time, so the time taken tells nothing about which one (if any) is
// close. The token itself never goes into an error, a log line or a metric.
func (f *httpFace) authenticate(r *http.Request) (string, *authError) {
	const realm = `Bearer realm="egressd-leases"`
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", &authError{&apiError{code: events.CodeUnauthorized, msg: "a bearer token is required: Authorization: Bearer <token>"}, realm}
	}
	sum := TokenHash(token)
	found := -1
	var crawlers []Crawler
	if cs := f.l.crawlers.Load(); cs != nil {
		crawlers = *cs
	}
	for i, c := range crawlers {
		if subtle.ConstantTimeCompare(sum[:], c.TokenSHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", &authError{&apiError{code: events.CodeUnauthorized, msg: "the bearer token is not one this leaser knows"},
			realm + `, error="invalid_token"`}
	}
	return crawlers[found].Name, nil
}

// withHolder makes the token's crawler the holder of an acquire: a request may leave holder
// out or repeat the crawler's name, but not name another, since the holder is who a lease
// (and, with per-holder caps, a share of a pool) is accounted to. The request is decoded
// strictly first, so a bad one gets the very error NATS gives, and encoded again from
// events.AcquireRequest, which therefore carries every field the service knows.
func withHolder(body []byte, crawler string) ([]byte, error) {
	var r events.AcquireRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if r.Holder != "" && r.Holder != crawler {
		return nil, badRequest("holder", "holder %q is not the crawler of this bearer token (%s): leave holder out, the token sets it",
			truncate(r.Holder, 40), crawler)
	}
	r.Holder = crawler
	return json.Marshal(r)
}

func (f *httpFace) writeError(w http.ResponseWriter, endpoint string, err error) {
	ae, body := f.l.errorReply(endpoint, err)
	writeJSON(w, int(ae.code), body)
}

// writeJSON answers with body; no-store, since a grant's URL may carry proxy credentials.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
