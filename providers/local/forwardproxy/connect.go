package forwardproxy

import (
	"io"
	"net"
	"net/http"
	"time"

	"github.com/egressd/egressd/internal/relay"
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
	if !h.tunnels.Track(client, up) {
		client.Close()
		up.Close()
		return
	}
	defer h.tunnels.Untrack(client, up)
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
	sent, received := relay.Splice(client, up, h.tunnelIdle)
	rec.bytes += sent + received
}
