package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/relay"
	"github.com/nats-io/nats.go"
)

// leaseError is what the crawler is told when no lease could be had. The lease service's
// messages name proxies, selectors and counts, never credentials.
func leaseError(err error) gatewayError {
	if se := (*client.Error)(nil); errors.As(err, &se) {
		switch se.Code {
		case events.CodeUnavailable:
			return gatewayError{status: http.StatusServiceUnavailable, kind: psInternalResponse, detail: se.Message}
		case events.CodeTooMany:
			return gatewayError{status: http.StatusTooManyRequests, kind: psInternalResponse, detail: se.Message}
		case events.CodeBadRequest:
			return gatewayError{status: http.StatusBadRequest, kind: psRequestError, detail: se.Message}
		}
	}
	switch {
	case errors.Is(err, client.ErrNoProxy):
		return gatewayError{status: http.StatusServiceUnavailable, kind: psInternalResponse, detail: "no proxy available"}
	case errors.Is(err, errPoolClosed):
		return gatewayError{status: http.StatusServiceUnavailable, kind: psInternalResponse, detail: errPoolClosed.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return gatewayError{status: http.StatusGatewayTimeout, kind: psInternalError, detail: "waited too long for a lease"}
	case errors.Is(err, nats.ErrNoResponders):
		return gatewayError{status: http.StatusServiceUnavailable, kind: psInternalError, detail: "no lease service is running"}
	}
	return gatewayError{status: http.StatusBadGateway, kind: psInternalError, detail: "the lease service failed; retry"}
}

// hop is how one attempt through a fleet proxy went.
type hop struct {
	status int   // the fleet proxy's answer to CONNECT, 0 when none came
	err    error // a failure to reach the fleet proxy or to read its answer
}

// dialThrough opens a tunnel to target through the leased proxy: CONNECT with the lease's
// credentials. On success the connection carries the tunnel (with whatever the proxy sent
// after its answer).
func (g *Gateway) dialThrough(ctx context.Context, h *held, target string) (net.Conn, hop) {
	up, err := h.upstream() // the latest renewal's credentials
	if err != nil {
		return nil, hop{err: errors.New("the lease's URL does not parse")}
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	conn, err := g.dialer.DialContext(ctx, "tcp", up.url.Host)
	if err != nil {
		return nil, hop{err: err}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+up.connectAuth+"\r\n"); err != nil {
		conn.Close()
		return nil, hop{err: err}
	}
	br := answerReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	status, early, err := readConnectAnswer(br)
	br.Reset(nil)
	answerReaders.Put(br)
	if err != nil {
		conn.Close()
		return nil, hop{err: err}
	}
	if status != http.StatusOK {
		conn.Close()
		return nil, hop{status: status}
	}
	if !stop() || ctx.Err() != nil {
		conn.Close()
		return nil, hop{err: context.DeadlineExceeded}
	}
	conn.SetDeadline(time.Time{})
	if len(early) > 0 {
		return &earlyConn{Conn: conn, early: early}, hop{status: http.StatusOK}
	}
	return conn, hop{status: http.StatusOK}
}

// answerReaders read fleet proxies' answers to CONNECT: a tunnel keeps no reader of its own.
var answerReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1024) }}

// readConnectAnswer reads the proxy's answer to CONNECT, and copies out what the proxy sent
// after it (the tunnel's first bytes, when the site spoke first).
func readConnectAnswer(br *bufio.Reader) (status int, early []byte, err error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, nil, err
	}
	resp.Body.Close()
	if n := br.Buffered(); n > 0 && resp.StatusCode == http.StatusOK {
		early = make([]byte, n)
		_, _ = io.ReadFull(br, early)
	}
	return resp.StatusCode, early, nil
}

// earlyConn reads the bytes that came with the proxy's answer first.
type earlyConn struct {
	net.Conn
	early []byte
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *earlyConn) CloseWrite() error { relay.CloseWrite(c.Conn); return nil }

// judgeHop turns a failed attempt into the rule's verdict and the crawler's answer. The
// error's text is never shown: a dial error names only an address, but the answer is built
// from the gateway's own words all the same.
func (g *Gateway) judgeHop(hp hop, proxy string) (hit, gatewayError) {
	var ne net.Error
	timeout := errors.Is(hp.err, context.DeadlineExceeded) || (errors.As(hp.err, &ne) && ne.Timeout())
	switch {
	case hp.err != nil && timeout:
		return hit{events.ReportFailed, "proxy timeout"}, gatewayError{status: http.StatusGatewayTimeout, kind: psConnTimeout,
			detail: "proxy " + proxy + " did not answer in time"}
	case hp.err != nil:
		return hit{events.ReportFailed, "proxy unreachable"}, gatewayError{status: http.StatusBadGateway, kind: psConnRefused,
			detail: "proxy " + proxy + " could not be reached"}
	case hp.status == http.StatusProxyAuthRequired:
		return hit{}, gatewayError{status: http.StatusBadGateway, kind: psInternalError, received: hp.status,
			detail: "proxy " + proxy + " refused the lease's credentials"}
	case hp.status == http.StatusBadGateway || hp.status == http.StatusGatewayTimeout:
		return g.cfg.Rules.unreachable(), gatewayError{status: hp.status, kind: psDestUnavailable, received: hp.status,
			detail: "proxy " + proxy + " could not reach the site"}
	}
	return g.cfg.Rules.status(hp.status), gatewayError{status: http.StatusBadGateway, kind: psConnTerminated, received: hp.status,
		detail: fmt.Sprintf("proxy %s answered the CONNECT with %d", proxy, hp.status)}
}

// connect serves CONNECT: a tunnel through a leased proxy, never read. A rotating route tries
// a second proxy when the first cannot open the tunnel (nothing has reached the crawler yet).
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request, rq *request) {
	target := r.Host
	host, port, err := net.SplitHostPort(target)
	if err != nil || host == "" || port == "" {
		rq.fail(w, gatewayError{status: http.StatusBadRequest, kind: psRequestError, detail: "CONNECT needs a host:port target"})
		return
	}
	var avoid []string
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(r.Context(), g.cfg.AcquireTimeout)
		h, err := g.pool.take(actx, rq.holder, rq.route, host, avoid)
		cancel()
		if err != nil {
			g.cfg.Log.Debug("gateway: no lease", "holder", rq.holder, "target", host, "err", err)
			rq.fail(w, leaseError(err))
			return
		}
		up, hp := g.dialThrough(r.Context(), h, target)
		if up != nil {
			g.tunnel(w, up, h, rq)
			g.pool.done(h)
			return
		}
		verdict, gerr := g.judgeHop(hp, h.lease.Proxy)
		g.afterFailure(r.Context(), rq, h, verdict, host, hp)
		g.pool.done(h)
		if attempt == 0 && rq.route.Session == "" && verdict.result != "" {
			avoid = append(avoid, h.lease.Proxy)
			continue
		}
		rq.result = "upstream_error"
		if verdict.result != "" {
			rq.result = string(verdict.result)
		}
		rq.fail(w, gerr)
		return
	}
}

// afterFailure reports a rule hit, and gives up a lease whose credentials were refused.
func (g *Gateway) afterFailure(ctx context.Context, rq *request, h *held, v hit, target string, hp hop) {
	if hp.status == http.StatusProxyAuthRequired {
		g.pool.drop(h)
	}
	if v.result == "" {
		return
	}
	g.cfg.Log.Info("gateway: rule hit", "lease", h.lease.ID, "proxy", h.lease.Proxy, "target", target,
		"result", v.result, "rule", v.why)
	g.cfg.Observer.ObserveGatewayHit(rq.holder, rq.route.Pool(), string(v.result))
	g.pool.report(context.WithoutCancel(ctx), h, v.result, target)
}

// tunnel answers the CONNECT and splices the crawler to the proxy's tunnel.
func (g *Gateway) tunnel(w http.ResponseWriter, up net.Conn, h *held, rq *request) {
	defer up.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rq.fail(w, gatewayError{status: http.StatusInternalServerError, kind: psInternalError, detail: "cannot take over the connection"})
		return
	}
	defer conn.Close()
	if !g.tunnels.Track(conn, up) {
		return
	}
	defer g.tunnels.Untrack(conn, up)
	conn.SetDeadline(time.Time{})
	rq.result = "ok"
	head := "HTTP/1.1 200 Connection established\r\n" + g.infoHeaderLines(h, rq) + "\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := up.Write(early); err != nil {
			return
		}
		rq.in += int64(n)
	}
	in, out := relay.Splice(conn, up, tunnelIdle)
	rq.in += in
	rq.out += out
}

// tunnelIdle cuts a tunnel that moved no byte either way for this long.
const tunnelIdle = 5 * time.Minute

// infoHeaderLines are the optional headers naming the proxy and the session, as raw lines.
func (g *Gateway) infoHeaderLines(h *held, rq *request) string {
	if !g.cfg.InfoHeaders {
		return ""
	}
	s := "X-Egressd-Proxy: " + h.lease.Proxy + "\r\n"
	if rq.route.Session != "" {
		s += "X-Egressd-Session: " + sanitizeHeader(rq.route.Session) + "\r\n"
	}
	return s
}

// sanitizeHeader keeps a header value to printable ASCII.
func sanitizeHeader(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
