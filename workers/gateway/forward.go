package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/egressd/egressd/internal/relay"
)

// proxyKey carries a request's fleet proxy URL to the transport's Proxy function.
type proxyKey struct{}

func newTransport(d *net.Dialer) *http.Transport {
	return &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			u, _ := r.Context().Value(proxyKey{}).(*url.URL)
			if u == nil {
				return nil, errors.New("gateway: no proxy for the request")
			}
			return u, nil
		},
		DialContext:           d.DialContext,
		ResponseHeaderTimeout: 60 * time.Second,
		// Compression stays end to end: the transport must not add Accept-Encoding and
		// then decode the body behind the crawler's back.
		DisableCompression:  true,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// removeHopHeaders drops the hop-by-hop headers and every Proxy-* header (the crawler's
// token among them): none is meant for the site.
func removeHopHeaders(h http.Header) {
	relay.RemoveHopHeaders(h)
	relay.RemoveProxyHeaders(h)
}

// forward serves an absolute-form http:// request through a leased proxy. A rotating,
// idempotent request that hits a rule is sent once more through another proxy.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, rq *request) {
	host := r.URL.Hostname()
	retry := rq.route.Session == "" && idempotent(r.Method, r.ContentLength)
	var avoid []string
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(r.Context(), g.cfg.AcquireTimeout)
		h, err := g.pool.take(actx, rq.holder, rq.route, host, avoid)
		cancel()
		if err != nil {
			rq.fail(w, leaseError(err))
			return
		}
		last := attempt > 0 || !retry
		if g.forwardOnce(w, r, h, rq, last) {
			g.pool.done(h)
			return
		}
		g.pool.done(h)
		avoid = append(avoid, h.lease.Proxy)
	}
}

// forwardOnce sends the request through h's proxy. It reports false when the answer hit a
// rule (or the proxy failed) and another attempt may be made: nothing has been written then.
func (g *Gateway) forwardOnce(w http.ResponseWriter, r *http.Request, h *held, rq *request, last bool) bool {
	host := r.URL.Hostname()
	up, err := h.upstream() // the latest renewal's credentials
	if err != nil {
		rq.fail(w, gatewayError{status: http.StatusBadGateway, kind: psInternalError, detail: "the lease's URL does not parse"})
		return true
	}
	resp, err := g.send(r, up)
	if err != nil {
		verdict, gerr := g.judgeTransport(err, h.lease.Proxy)
		g.afterFailure(r.Context(), rq, h, verdict, host, hop{err: err})
		if verdict.result != "" && !last {
			return false
		}
		rq.result = "upstream_error"
		rq.fail(w, gerr)
		return true
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusProxyAuthRequired {
		g.afterFailure(r.Context(), rq, h, hit{}, host, hop{status: resp.StatusCode})
		if !last {
			return false
		}
		rq.result = "upstream_error"
		rq.fail(w, gatewayError{status: http.StatusBadGateway, kind: psInternalError, received: resp.StatusCode,
			detail: "proxy " + h.lease.Proxy + " refused the lease's credentials"})
		return true
	}
	verdict := g.cfg.Rules.status(resp.StatusCode)
	var head []byte
	if verdict.result == "" && len(g.cfg.Rules.BodyMarkers) > 0 {
		head, _ = io.ReadAll(io.LimitReader(resp.Body, MarkerWindow))
		verdict = g.cfg.Rules.body(head)
	}
	rq.result = "ok"
	if verdict.result != "" {
		g.afterFailure(r.Context(), rq, h, verdict, host, hop{status: resp.StatusCode})
		if !last {
			return false
		}
		rq.result = string(verdict.result)
	}
	rq.in += max(r.ContentLength, 0)
	g.relay(w, resp, head, h, rq)
	return true
}

// send sends r on through the proxy up: on a kept connection of the gateway's own when r
// may be sent again (most crawling), through the Transport otherwise.
func (g *Gateway) send(r *http.Request, up *upstream) (*http.Response, error) {
	h := r.Header.Clone()
	removeHopHeaders(h)
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // otherwise net/http announces itself
	}
	if replayable(r) {
		if up.basicAuth != "" {
			h["Proxy-Authorization"] = []string{up.basicAuth}
		}
		out := &http.Request{Method: r.Method, URL: r.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h, Host: r.Host}
		return g.upstreams.roundTrip(r.Context(), up.url.Host, out)
	}
	out := r.WithContext(context.WithValue(r.Context(), proxyKey{}, up.url))
	out.Header, out.RequestURI, out.Close = h, "", false
	if r.ContentLength == 0 {
		out.Body = nil
	}
	return g.transport.RoundTrip(out)
}

// judgeTransport judges a request that got no answer through the proxy.
func (g *Gateway) judgeTransport(err error, proxy string) (hit, gatewayError) {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "proxyconnect" {
		return g.judgeHop(hop{err: oe.Err}, proxy)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return g.cfg.Rules.unreachable(), gatewayError{status: http.StatusGatewayTimeout, kind: psConnTimeout,
			detail: "no answer through proxy " + proxy + " in time"}
	}
	return hit{}, gatewayError{status: http.StatusBadGateway, kind: psConnTerminated,
		detail: "the connection through proxy " + proxy + " ended without an answer"}
}

// relay writes the origin's answer: its headers less the hop ones, the optional info headers,
// the body already read, then the rest as it comes.
func (g *Gateway) relay(w http.ResponseWriter, resp *http.Response, head []byte, h *held, rq *request) {
	removeHopHeaders(resp.Header)
	for k, vv := range resp.Header {
		w.Header()[k] = append(w.Header()[k], vv...)
	}
	if g.cfg.InfoHeaders {
		w.Header().Set("X-Egressd-Proxy", h.lease.Proxy)
		if rq.route.Session != "" {
			w.Header().Set("X-Egressd-Session", sanitizeHeader(rq.route.Session))
		}
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := w.Write(head)
	rq.out += int64(n)
	m, _ := relay.CopyBody(w, resp.Body, resp.ContentLength < 0)
	rq.out += m
}
