package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/httpface"
)

// The HTTP face (package httpface) serves the endpoints as JSON over HTTP. This file is the
// service's side of it: the face's config under the names callers know, the crawler swap, and
// httpService, through which the face runs each request on the very handlers NATS does.

// HTTPConfig turns on the HTTP face (httpface.Config): the four endpoints as JSON over HTTP,
// for crawlers without a NATS client, with the same handlers, limits and errors as the micro
// service. Every request needs the bearer token of one of Crawlers.
type HTTPConfig = httpface.Config

// Crawler is one bearer token of the HTTP face (httpface.Crawler).
type Crawler = httpface.Crawler

// HTTPPathPrefix is where the HTTP face serves the endpoints: POST /v1/leases/acquire, …
const HTTPPathPrefix = httpface.PathPrefix

// DefaultHTTPMaxBody bounds a request body of the HTTP face (httpface.DefaultMaxBody).
const DefaultHTTPMaxBody = httpface.DefaultMaxBody

// TokenHash is the hash a Crawler keeps of token.
func TokenHash(token string) [32]byte { return httpface.TokenHash(token) }

// SetHTTPCrawlers replaces the crawlers the HTTP face lets in, from the next request on
// (httpface.Face.SetCrawlers): `egressd run` calls it when its config is reloaded (SIGHUP).
func (l *Leaser) SetHTTPCrawlers(crawlers []Crawler) error {
	if l.face == nil {
		return errors.New("leaser: HTTP: the face is not configured")
	}
	return l.face.SetCrawlers(crawlers)
}

// startHTTP serves the HTTP face, if configured, until the returned stop, which shuts it
// down gracefully within ShutdownBudget. A failure of the server goes to failed.
func (l *Leaser) startHTTP(ctx context.Context, wg *sync.WaitGroup, failed chan<- error) (stop func()) {
	if l.face == nil {
		return func() {}
	}
	return l.face.Start(ctx, wg, failed, l.cfg.RequestBudget+max(l.cfg.MaxWait, 0), l.cfg.ShutdownBudget)
}

// httpService is the leaser as the HTTP face calls it (httpface.Service). It is not a method
// set of Leaser itself: Call trusts the crawler it is given, which only the face has proved.
type httpService struct{ l *Leaser }

// Call runs endpoint as a NATS request would run (budget, span, metrics, handler, error
// reply), with crawler as the request's caller, who alone may renew, release or report its
// leases (checkCaller), and as the holder of what it acquires (withHolder).
func (s httpService) Call(ctx context.Context, endpoint, crawler string, headers map[string][]string, body []byte, respond func(int, []byte)) {
	l := s.l
	h := l.handlers()[endpoint]
	if h == nil {
		_, b := l.errorReply(endpoint, &apiError{code: events.CodeNotFound, msg: fmt.Sprintf("no endpoint %s", truncate(endpoint, 80))})
		respond(http.StatusNotFound, b)
		return
	}
	ctx, end := l.startCall(withCaller(ctx, crawler), endpoint, headers)
	var err error
	if endpoint == "acquire" {
		body, err = withHolder(body, crawler, headers[events.IdempotencyKeyHeader])
	}
	var (
		reply  any
		waited time.Duration
	)
	switch {
	case err != nil:
	case endpoint == "acquire":
		reply, waited, err = l.acquireWith(ctx, body, headers, httpface.ClientGone(ctx))
	default:
		reply, err = h(ctx, body)
	}
	defer func() { end(err, waited) }() // after the reply, as over NATS
	if err == nil {
		var b []byte
		if b, err = json.Marshal(reply); err == nil {
			respond(http.StatusOK, b)
			return
		}
	}
	ae, b := l.errorReply(endpoint, err)
	respond(int(ae.code), b)
}

// Refused counts a request the face refused before calling (unauthorized).
func (s httpService) Refused(endpoint, result string) {
	s.l.cfg.Observer.ObserveLease(endpoint, result, 0)
}

// handlers are the endpoints the HTTP face calls, by name.
func (l *Leaser) handlers() map[string]func(context.Context, []byte) (any, error) {
	return map[string]func(context.Context, []byte) (any, error){
		"acquire": l.acquire, "renew": l.renew, "release": l.release, "report": l.report,
	}
}

// withHolder makes the token's crawler the holder of an acquire: a request may leave holder
// out or repeat the crawler's name, but not name another, since the holder is who a lease
// (and, with per-holder caps, a share of a pool) is accounted to. The request is decoded
// strictly first, so a bad one gets the very error NATS gives, and encoded again from
// events.AcquireRequest, which therefore carries every field the service knows.
//
// An Idempotency-Key header is the acquire's requestId: the same as the body's, or in its
// place.
func withHolder(body []byte, crawler string, idemKey []string) ([]byte, error) {
	var r events.AcquireRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	switch {
	case len(idemKey) > 1:
		return nil, badRequest("requestId", "header %s must be sent once, was sent %d times", events.IdempotencyKeyHeader, len(idemKey))
	case len(idemKey) == 0:
	case checkRequestID(idemKey[0]) != nil:
		return nil, checkRequestID(idemKey[0])
	case r.RequestID == "":
		r.RequestID = idemKey[0]
	case r.RequestID != idemKey[0]:
		return nil, badRequest("requestId", "requestId and the %s header differ: send one, or the same in both", events.IdempotencyKeyHeader)
	}
	if r.Holder != "" && r.Holder != crawler {
		return nil, badRequest("holder", "holder %q is not the crawler of this bearer token (%s): leave holder out, the token sets it",
			truncate(r.Holder, 40), crawler)
	}
	r.Holder = crawler
	return json.Marshal(r)
}
