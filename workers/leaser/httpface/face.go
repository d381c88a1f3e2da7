package httpface

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
)

// Service is the lease service as the face calls it; *leaser.Leaser implements it.
type Service interface {
	// Call runs endpoint (acquire, renew, release or report) on body for crawler, the caller its bearer token
	// proved, as the NATS service would run it, and hands respond the HTTP status and the JSON
	// body: the reply, or the error as an events.ErrorReply. headers are the request's trace
	// context headers. Call returns once respond has, so what it records of the request (its
	// span, its metric) includes the answer, as over NATS.
	Call(ctx context.Context, endpoint, crawler string, headers map[string][]string, body []byte, respond func(status int, body []byte))
	// Refused counts a request to endpoint the face refused before calling (its metric).
	Refused(endpoint, result string)
}

// Face serves a Service over HTTP.
type Face struct {
	cfg      Config
	svc      Service
	log      *slog.Logger
	crawlers atomic.Pointer[[]Crawler] // SetCrawlers swaps them
}

// New returns the face of svc; cfg must have passed Check.
func New(cfg Config, svc Service, log *slog.Logger) *Face {
	f := &Face{cfg: cfg, svc: svc, log: log}
	cs := slices.Clone(cfg.Crawlers)
	f.crawlers.Store(&cs)
	return f
}

// SetCrawlers replaces the crawlers the face lets in, from the next request on: `egressd run`
// calls it (through the leaser) when its config is reloaded (SIGHUP), so a crawler is added,
// or a leaked token revoked, without a restart. An empty list lets nobody in. Leases already
// granted are not touched: they are renewed and released by ID, and the ID is the holder's.
func (f *Face) SetCrawlers(crawlers []Crawler) error {
	if err := CheckCrawlers(crawlers); err != nil {
		return err
	}
	cs := slices.Clone(crawlers)
	f.crawlers.Store(&cs)
	return nil
}

// Start serves the face until the returned stop, which shuts it down gracefully within
// shutdownBudget. ctx is the service's own, not a request's: a caller that hangs up does not
// cut a request short, just as over NATS. A write may take requestBudget (which includes the
// longest wait of an acquire) and a margin. A
// failure of the server goes to failed; the server's goroutine is in wg.
func (f *Face) Start(ctx context.Context, wg *sync.WaitGroup, failed chan<- error, requestBudget, shutdownBudget time.Duration) (stop func()) {
	srv := &http.Server{
		Handler: &handler{f: f, ctx: ctx},
		// Budgets: a slow or stalled client holds a connection only this long.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      requestBudget + 10*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
	}
	ln := f.cfg.Listener
	scheme := "http"
	if f.cfg.TLS != nil {
		ln, scheme = tls.NewListener(ln, f.cfg.TLS), "https"
	}
	f.log.Info("lease HTTP face started", "url", scheme+"://"+f.cfg.Listener.Addr().String()+PathPrefix, "crawlers", len(f.cfg.Crawlers))
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			select {
			case failed <- fmt.Errorf("lease HTTP face: %w", err):
			default:
			}
		}
	})
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			f.log.Warn("lease HTTP face: requests still running at shutdown", "err", err)
			_ = srv.Close()
		}
	}
}

// handler is the face while it serves, with the service's context.
type handler struct {
	f   *Face
	ctx context.Context
}

// ServeHTTP authenticates first, so a caller without a token learns nothing, not even which
// paths exist; then it hands the body to the service and answers as NATS would, with the
// error code as the status.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, _ := strings.CutPrefix(r.URL.Path, PathPrefix)
	known := slices.Contains(endpoints, name)
	crawler, aerr := h.f.authenticate(r)
	if aerr != nil {
		if known {
			h.f.svc.Refused(name, "unauthorized")
		}
		w.Header().Set("WWW-Authenticate", aerr.challenge)
		writeError(w, aerr.detail)
		return
	}
	switch {
	case !known:
		writeError(w, events.ErrorDetail{Code: events.CodeNotFound,
			Message: fmt.Sprintf("no endpoint at %s: POST %s{acquire,renew,release,report}", truncate(r.URL.Path, 80), PathPrefix)})
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, events.ErrorDetail{Code: events.CodeMethodNotAllowed, Message: fmt.Sprintf("%s takes POST, not %s", r.URL.Path, truncate(r.Method, 16))})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.f.cfg.MaxBodyBytes))
	if err != nil {
		if tooLarge, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, events.ErrorDetail{Code: events.CodeTooLarge, Field: "(document)",
				Message: fmt.Sprintf("the request body is over %d bytes", tooLarge.Limit)})
		} else {
			writeError(w, events.ErrorDetail{Code: events.CodeBadRequest, Field: "(document)",
				Message: fmt.Sprintf("reading the request body: %v", err)})
		}
		return
	}
	// The service's context, not the request's (a hang-up does not cut a request short), but
	// a waiting acquire learns of the hang-up through ClientGone and leaves the queue.
	ctx := context.WithValue(h.ctx, goneKey{}, r.Context().Done())
	h.f.svc.Call(ctx, name, crawler, callHeaders(r.Header), body, func(status int, b []byte) { writeJSON(w, status, b) })
}

type goneKey struct{}

// ClientGone is closed when the HTTP caller of a request whose context the face made has
// hung up; nil (never closed) for any other context.
func ClientGone(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(goneKey{}).(<-chan struct{})
	return ch
}

// callHeaders are the W3C trace context headers of an HTTP request under the names the
// tracing carrier looks up, as written on NATS: HTTP canonicalises them ("Traceparent"), and
// the caller's reply timeout of a waiting acquire (events.ReplyTimeoutHeader), and an
// acquire's Idempotency-Key (events.IdempotencyKeyHeader, its requestId). Only these go
// on: the others (Authorization) have no business in tracing.
func callHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, name := range []string{"traceparent", "tracestate", events.ReplyTimeoutHeader, events.IdempotencyKeyHeader} {
		if v := h.Values(name); len(v) > 0 {
			out[name] = v
		}
	}
	return out
}

// authError is a refused token and its WWW-Authenticate challenge (RFC 6750).
type authError struct {
	detail    events.ErrorDetail
	challenge string
}

// authenticate finds the crawler whose token the request carries. Every configured hash is
// compared, in constant time, so the time taken tells nothing about which one (if any) is
// close. The token itself never goes into an error, a log line or a metric.
func (f *Face) authenticate(r *http.Request) (string, *authError) {
	const realm = `Bearer realm="egressd-leases"`
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", &authError{events.ErrorDetail{Code: events.CodeUnauthorized, Message: "a bearer token is required: Authorization: Bearer <token>"}, realm}
	}
	sum := TokenHash(token)
	found := -1
	var crawlers []Crawler
	if cs := f.crawlers.Load(); cs != nil {
		crawlers = *cs
	}
	for i, c := range crawlers {
		if subtle.ConstantTimeCompare(sum[:], c.TokenSHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", &authError{events.ErrorDetail{Code: events.CodeUnauthorized, Message: "the bearer token is not one this leaser knows"},
			realm + `, error="invalid_token"`}
	}
	return crawlers[found].Name, nil
}

// writeError answers with d as the service answers its own errors (events.ErrorReply).
func writeError(w http.ResponseWriter, d events.ErrorDetail) {
	body, err := json.Marshal(events.ErrorReply{Error: d})
	if err != nil {
		body = nil
	}
	writeJSON(w, int(d.Code), body)
}

// writeJSON answers with body; no-store, since a grant's URL may carry proxy credentials.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// truncate keeps an echoed value short.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
