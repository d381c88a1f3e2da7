package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// splice copies both ways until both sides have finished, passing a half-close on and
// cutting the tunnel when no byte moved either way for idle. It returns the bytes copied
// from client to up, and back.
func splice(client, up net.Conn, idle time.Duration) (in, out int64) {
	t := &tunnelState{idle: idle}
	t.touch()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); n, err := t.pipe(up, client); in = n; errc <- err }()
	go func() { defer wg.Done(); n, err := t.pipe(client, up); out = n; errc <- err }()
	for range 2 {
		if err := <-errc; err != nil {
			// A reset or an idle cut on one side ends the other one too.
			client.Close()
			up.Close()
		}
	}
	wg.Wait()
	return in, out
}

type tunnelState struct {
	idle time.Duration
	last atomic.Int64 // unix nanoseconds of the last byte either way
}

func (t *tunnelState) touch() { t.last.Store(time.Now().UnixNano()) }

func (t *tunnelState) quiet() bool { return time.Since(time.Unix(0, t.last.Load())) >= t.idle }

func (t *tunnelState) pipe(dst, src net.Conn) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(t.idle))
		n, err := src.Read(buf)
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
			closeWrite(dst)
			return total, nil
		case errors.Is(err, os.ErrDeadlineExceeded) && !t.quiet():
			// This side is quiet but the other is not: a download with nothing to upload.
		default:
			return total, err
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// tunnels are the hijacked connections, which http.Server's shutdown does not track: Run
// cuts them when it ends.
type tunnels struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	active sync.WaitGroup
}

func newTunnels() *tunnels { return &tunnels{conns: map[net.Conn]struct{}{}} }

func (t *tunnels) track(cs ...net.Conn) bool {
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

func (t *tunnels) untrack(cs ...net.Conn) {
	t.mu.Lock()
	for _, c := range cs {
		delete(t.conns, c)
	}
	t.mu.Unlock()
	t.active.Done()
}

func (t *tunnels) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

func (t *tunnels) wait(budget time.Duration) {
	done := make(chan struct{})
	go func() { t.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(budget):
	}
}
