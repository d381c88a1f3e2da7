package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// upstreams are the gateway's kept-alive connections to fleet proxies for plain-HTTP
// requests without a body that may be sent again (replayable): the request is written with
// the standard library's WriteProxy and the answer read with its ReadResponse, both on the
// handler's goroutine. http.Transport does the same framing but hands each request to two
// goroutines of its own per connection (a writer and a reader) over channels, which cost the
// gateway a quarter of its CPU per request (docs/performance.md, "The gateway"). Requests
// with a body keep the Transport: it sends the body while reading an early answer.
type upstreams struct {
	dialer        *net.Dialer
	headerTimeout time.Duration // for the answer's head (responseHeaderTimeout; tests shorten it)

	mu     sync.Mutex
	idle   map[string][]*upConn // by proxy address, most recently used last
	closed bool
}

// upConn is one connection to a fleet proxy with its reader and writer, kept between requests.
type upConn struct {
	net.Conn
	pool      *upstreams
	addr      string
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// Limits of the kept connections, the Transport's that the gateway had before.
const (
	maxIdlePerProxy       = 64
	upstreamIdleTimeout   = 90 * time.Second
	responseHeaderTimeout = 60 * time.Second
	maxInformational      = 5 // 1xx answers skipped before the final one, as the Transport does
)

// aLongTimeAgo is a deadline in the past: it wakes whatever waits on the connection.
var aLongTimeAgo = time.Unix(1, 0)

func newUpstreams(d *net.Dialer) *upstreams {
	return &upstreams{dialer: d, headerTimeout: responseHeaderTimeout, idle: map[string][]*upConn{}}
}

// replayable reports whether r may take the fast path: no body, and a method the Transport
// itself would send again on a new connection when a kept one turns out closed (RFC 9110
// §9.2.2, or an idempotency key).
func replayable(r *http.Request) bool {
	if r.ContentLength != 0 {
		return false
	}
	switch r.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	_, key := r.Header["Idempotency-Key"]
	_, xkey := r.Header["X-Idempotency-Key"]
	return key || xkey
}

// roundTrip sends req (replayable) through the proxy at addr and reads the answer's head.
// The answer's body must be closed: read to its end it gives the connection back for the
// next request, otherwise it closes it. A dial failure is a *net.OpError "proxyconnect",
// as the Transport's is; a request ctx ended is ctx's error.
func (u *upstreams) roundTrip(ctx context.Context, addr string, req *http.Request) (*http.Response, error) {
	for {
		c, reused, err := u.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		resp, answered, err := c.exchange(ctx, req)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A kept connection the proxy had closed meanwhile: the request goes again on the
		// next one (each kept connection is tried at most once, then a new one is dialled).
		if !reused || answered || isTimeout(err) {
			return nil, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// exchange writes req and reads the answer's head. answered tells that some of the answer
// had come when the exchange failed (the request must not be sent again then).
func (c *upConn) exchange(ctx context.Context, req *http.Request) (resp *http.Response, answered bool, err error) {
	// The request's context ends the exchange and, later, the body's relay (the crawler has
	// gone): the deadline in the past wakes the blocked read or write.
	_ = c.SetReadDeadline(time.Now().Add(c.pool.headerTimeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	if err := req.WriteProxy(c.bw); err != nil {
		stop()
		return nil, false, err
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, false, err
	}
	if _, err := c.br.Peek(1); err != nil {
		stop()
		return nil, false, err
	}
	for i := 0; ; i++ {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			stop()
			return nil, true, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols || i == maxInformational {
			break
		}
	}
	if resp.StatusCode < 200 {
		stop()
		return nil, true, errors.New("the proxy switched protocols or sent too many informational answers")
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := ctx.Err(); err != nil {
		// Ended before the line above: its deadline in the past may have been undone.
		stop()
		return nil, true, err
	}
	resp.Body = &upBody{body: resp.Body, c: c, stop: stop, reuse: !resp.Close && !req.Close}
	return resp, true, nil
}

// upBody is an answer's body read from a kept connection.
type upBody struct {
	body   io.ReadCloser
	c      *upConn
	stop   func() bool
	reuse  bool
	eof    bool
	closed bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close gives the connection back when the body was read to its end, nothing came after it
// (a proxy that sent more than it announced is not trusted with the next request) and the
// request's context did not cut it; otherwise it closes the connection (never reading the
// rest of a body nobody wants).
func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.stop() && b.eof && b.reuse && b.c.br.Buffered() == 0 {
		b.c.idleSince = time.Now()
		if b.c.pool.put(b.c) {
			return nil
		}
	}
	return b.c.Close()
}

// get returns a kept connection to addr, the most recently used, or dials a new one.
func (u *upstreams) get(ctx context.Context, addr string) (c *upConn, reused bool, err error) {
	u.mu.Lock()
	if cs := u.idle[addr]; len(cs) > 0 {
		c = cs[len(cs)-1]
		cs[len(cs)-1] = nil
		u.idle[addr] = cs[:len(cs)-1]
	}
	u.mu.Unlock()
	if c != nil {
		return c, true, nil
	}
	conn, err := u.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, &net.OpError{Op: "proxyconnect", Net: "tcp", Err: err}
	}
	return &upConn{Conn: conn, pool: u, addr: addr, br: bufio.NewReader(conn), bw: bufio.NewWriter(conn)}, false, nil
}

// put keeps c for the next request to its proxy; it reports false (and c is the caller's to
// close) when the gateway is shutting down or the proxy has enough kept already.
func (u *upstreams) put(c *upConn) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || len(u.idle[c.addr]) >= maxIdlePerProxy {
		return false
	}
	u.idle[c.addr] = append(u.idle[c.addr], c)
	return true
}

// reap closes the connections kept unused for upstreamIdleTimeout.
func (u *upstreams) reap(now time.Time) {
	var old []*upConn
	u.mu.Lock()
	for addr, cs := range u.idle {
		// The least recently used are first.
		n := 0
		for n < len(cs) && now.Sub(cs[n].idleSince) >= upstreamIdleTimeout {
			n++
		}
		old = append(old, cs[:n]...)
		if n == len(cs) {
			delete(u.idle, addr)
		} else if n > 0 {
			u.idle[addr] = append(cs[:0:0], cs[n:]...)
		}
	}
	u.mu.Unlock()
	for _, c := range old {
		c.Close()
	}
}

// closeAll closes every kept connection and keeps none from now on.
func (u *upstreams) closeAll() {
	u.mu.Lock()
	u.closed = true
	idle := u.idle
	u.idle = map[string][]*upConn{}
	u.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.Close()
		}
	}
}

// run reaps until ctx ends, then closes what is kept.
func (u *upstreams) run(ctx context.Context) {
	t := time.NewTicker(upstreamIdleTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			u.closeAll()
			return
		case now := <-t.C:
			u.reap(now)
		}
	}
}
