// Package relay is what the forward proxies of egressd share for relaying traffic: the
// tunnel splice with its idle cut, the streaming of a response body, the hop-by-hop and
// Proxy-* headers a proxy must not pass on, and the hijacked connections a server's
// shutdown does not track. The local provider's forward proxy and the gateway role both use
// it; it imports only the standard library.
package relay

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Splice copies both ways until both sides have finished, passing a half-close on (a client
// that shuts down its sending side still gets the whole answer) and cutting the tunnel when
// no byte moved either way for idle. It returns the bytes copied from client to up, and back.
func Splice(client, up net.Conn, idle time.Duration) (sent, received int64) {
	t := &tunnelState{idle: idle}
	t.touch()
	// A reset or an idle cut on one side ends the other one too: each side closes both
	// connections on its own error, since the other may be blocked in a read. The download
	// side runs on the caller's goroutine, one goroutine fewer a tunnel.
	cut := func(err error) {
		if err != nil {
			client.Close()
			up.Close()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := t.pipe(up, client)
		sent = n
		cut(err)
	}()
	received, err := t.pipe(client, up)
	cut(err)
	<-done
	return sent, received
}

type tunnelState struct {
	idle time.Duration
	last atomic.Int64 // unix nanoseconds of the last byte either way
}

func (t *tunnelState) touch() { t.last.Store(time.Now().UnixNano()) }

func (t *tunnelState) quiet() bool { return time.Since(time.Unix(0, t.last.Load())) >= t.idle }

// An idle tunnel holds two read buffers: they start small and grow once a read fills one,
// so a tunnel that only waits costs little and a bulk transfer moves in large reads.
const (
	smallBuffer = 4 << 10
	largeBuffer = 32 << 10
)

func (t *tunnelState) pipe(dst, src net.Conn) (int64, error) {
	buf := make([]byte, smallBuffer)
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(t.idle))
		n, err := src.Read(buf)
		if n == len(buf) && len(buf) < largeBuffer {
			grown := make([]byte, largeBuffer)
			copy(grown, buf[:n])
			buf = grown
		}
		if n > 0 {
			t.touch()
			_ = dst.SetWriteDeadline(time.Now().Add(t.idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			CloseWrite(dst)
			return total, nil
		case errors.Is(err, os.ErrDeadlineExceeded) && !t.quiet():
			// This side is quiet but the other is not: a download with nothing to upload.
		default:
			return total, err
		}
	}
}

// CloseWrite shuts down c's sending side, or closes it when it cannot half-close.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// CopyBody streams body to w; a body of unknown length (event streams, long polls) is
// flushed as it comes rather than when the server's buffer fills.
func CopyBody(w http.ResponseWriter, body io.Reader, flush bool) (int64, error) {
	if !flush {
		return io.Copy(w, body)
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			_ = rc.Flush()
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// hopHeaders concern one connection, not the request; Proxy-Authorization is the proxy's
// and must not reach the site.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// RemoveHopHeaders drops the hop-by-hop headers and those the Connection header names.
func RemoveHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// RemoveProxyHeaders drops every header named Proxy-*: by convention they are meant for a
// proxy (credentials, connection options, a client's proxy hints), never for the site, and
// one passed on tells the site a proxy is in the way.
func RemoveProxyHeaders(h http.Header) {
	for name := range h {
		if len(name) > len("Proxy-") && strings.EqualFold(name[:len("Proxy-")], "Proxy-") {
			delete(h, name)
		}
	}
}

// Tunnels are hijacked connections, which http.Server's shutdown does not track: the server's
// owner cuts them when it stops.
type Tunnels struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	active sync.WaitGroup
}

// NewTunnels returns an empty set.
func NewTunnels() *Tunnels { return &Tunnels{conns: map[net.Conn]struct{}{}} }

// Track registers a tunnel's connections. It reports false once CloseAll has run; the caller
// then closes them itself.
func (t *Tunnels) Track(cs ...net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	for _, c := range cs {
		t.conns[c] = struct{}{}
	}
	t.active.Add(1)
	return true
}

// Untrack ends what Track began.
func (t *Tunnels) Untrack(cs ...net.Conn) {
	t.mu.Lock()
	for _, c := range cs {
		delete(t.conns, c)
	}
	t.mu.Unlock()
	t.active.Done()
}

// CloseAll cuts every tunnel and refuses new ones.
func (t *Tunnels) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

// Wait gives the tunnels' handlers up to budget to return.
func (t *Tunnels) Wait(budget time.Duration) {
	done := make(chan struct{})
	go func() { t.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(budget):
	}
}
