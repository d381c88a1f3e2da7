package forwardproxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

func (h *handler) connect(w http.ResponseWriter, r *http.Request, rec *record, g grant) {
	target := r.Host
	if host, port, err := net.SplitHostPort(target); err != nil || host == "" || port == "" {
		rec.fail(w, http.StatusBadRequest, "CONNECT needs a host:port target")
		return
	}
	// Dial before hijacking, so that a failure is still an ordinary HTTP response.
	up, err := h.dialer.DialContext(r.Context(), "tcp", target)
	if err != nil {
		rec.fail(w, upstreamStatus(err), "cannot reach "+target+": "+err.Error())
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		rec.fail(w, http.StatusInternalServerError, "cannot take over the connection")
		return
	}
	if !h.track(client, up) {
		client.Close()
		up.Close()
		return
	}
	defer h.untrack(client, up)
	defer client.Close()
	defer up.Close()
	// A tunnel lives no longer than the lease token that opened it.
	stop := h.guardTunnel(g, client, up)
	defer stop()

	// The server may have left its header deadlines on the connection.
	client.SetDeadline(time.Time{})
	rec.status = http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// A client may send its first bytes (a TLS ClientHello) right behind the CONNECT request;
	// they are already in the server's buffer, not on the socket.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := up.Write(early); err != nil {
			return
		}
		rec.bytes += int64(n)
	}
	rec.bytes += splice(client, up, h.tunnelIdle)
}

// splice copies both ways until both sides have finished, passing a half-close on (a client
// that shuts down its sending side still gets the whole answer) and cutting the tunnel when no
// byte has moved either way for idle. It returns the bytes copied.
func splice(a, b net.Conn, idle time.Duration) int64 {
	t := &tunnelState{idle: idle}
	t.touch()
	errc := make(chan error, 2)
	go func() { errc <- t.pipe(b, a) }()
	go func() { errc <- t.pipe(a, b) }()
	for range 2 {
		if err := <-errc; err != nil {
			// A reset or an idle cut on one side ends the other one too.
			a.Close()
			b.Close()
		}
	}
	return t.bytes.Load()
}

type tunnelState struct {
	idle  time.Duration
	last  atomic.Int64 // unix nanoseconds of the last byte either way
	bytes atomic.Int64
}

func (t *tunnelState) touch() { t.last.Store(time.Now().UnixNano()) }

func (t *tunnelState) quiet() bool {
	return time.Since(time.Unix(0, t.last.Load())) >= t.idle
}

func (t *tunnelState) pipe(dst, src net.Conn) error {
	buf := make([]byte, 32<<10)
	for {
		src.SetReadDeadline(time.Now().Add(t.idle))
		n, err := src.Read(buf)
		if n > 0 {
			t.touch()
			dst.SetWriteDeadline(time.Now().Add(t.idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			t.bytes.Add(int64(n))
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			closeWrite(dst)
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded) && !t.quiet():
			// This side is quiet but the other is not: a download with nothing to upload.
		default:
			return err
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
