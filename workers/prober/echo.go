package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// EchoReply is what the echo endpoint answers: the address the request came from (through a
// proxy, the proxy's egress address) and the headers it received.
type EchoReply struct {
	V          int                 `json:"v"`
	RemoteAddr string              `json:"remoteAddr"`
	IP         string              `json:"ip"`
	Headers    map[string][]string `json:"headers"`
}

// redacted headers are echoed by name only: their presence is what a probe looks for, and
// their values (a leaked proxy password) must not travel back through the proxy in a body.
var redacted = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// leakHeaders are the headers that give a proxy away, or its credentials, to the sites a
// crawler visits, in the canonical spelling the records use. Any of them makes a path at
// best anonymous; any header carrying the client's address makes it transparent (judge).
var leakHeaders = []string{"Via", "X-Forwarded-For", "Forwarded", "X-Real-Ip", "Client-Ip", "X-Proxy-Id", "Proxy-Authorization"}

// EchoHandler answers GET and HEAD with an EchoReply as JSON.
func EchoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		reply := EchoReply{V: 1, RemoteAddr: r.RemoteAddr, Headers: map[string][]string{}}
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			reply.IP = ap.Addr().Unmap().String()
		}
		for k, v := range r.Header {
			reply.Headers[k] = v
		}
		for _, k := range redacted {
			if vs, ok := reply.Headers[k]; ok {
				reply.Headers[k] = make([]string, len(vs))
				for i := range vs {
					reply.Headers[k][i] = "[redacted]"
				}
			}
		}
		b, err := json.Marshal(reply)
		if err != nil {
			http.Error(w, "encode", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(b, '\n'))
	})
}

// Echo server limits: it faces whatever the proxies let through, so every phase is bounded.
const (
	echoReadHeaderTimeout = 10 * time.Second
	echoIdleTimeout       = time.Minute
	echoShutdownBudget    = 5 * time.Second
	echoMaxHeaderBytes    = 64 << 10
)

// ServeEcho serves EchoHandler on ln until ctx ends, then shuts down gracefully within a short
// budget and returns nil. Any other error of the listener is returned.
func ServeEcho(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           EchoHandler(),
		ReadHeaderTimeout: echoReadHeaderTimeout,
		ReadTimeout:       echoReadHeaderTimeout,
		WriteTimeout:      echoReadHeaderTimeout,
		IdleTimeout:       echoIdleTimeout,
		MaxHeaderBytes:    echoMaxHeaderBytes,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("echo endpoint: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), echoShutdownBudget)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // out of budget: cut what is left
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("echo endpoint: %w", err)
	}
	return nil
}

// decodeEcho recognises an echo endpoint's answer: JSON of version 1 with a parseable IP.
// Anything else (another check URL's page) is simply not an echo.
func decodeEcho(contentType string, body []byte) (EchoReply, bool) {
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "application/json" {
		return EchoReply{}, false
	}
	var r EchoReply
	if err := json.Unmarshal(body, &r); err != nil || r.V != 1 {
		return EchoReply{}, false
	}
	ip, err := netip.ParseAddr(r.IP)
	if err != nil {
		return EchoReply{}, false
	}
	r.IP = ip.Unmap().String()
	return r, true
}

// leaked lists the leakHeaders the target received, in leakHeaders' order. Names are matched
// case-insensitively, since another echo service may not canonicalise them.
func (r EchoReply) leaked() []string {
	var out []string
	for _, name := range leakHeaders {
		for k := range r.Headers {
			if strings.EqualFold(k, name) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}
