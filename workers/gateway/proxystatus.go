package gateway

import (
	"io"
	"net/http"
	"strconv"
	"strings"
)

// proxyName is this gateway's name in Proxy-Status (RFC 9209).
const proxyName = "egressd"

// RFC 9209 error types the gateway uses.
const (
	psRequestDenied    = "http_request_denied"     // the token is unknown
	psRequestError     = "http_request_error"      // the request (its username) is malformed
	psInternalResponse = "proxy_internal_response" // no proxy to send it through: answered here
	psInternalError    = "proxy_internal_error"    // the lease service failed or took too long
	psConnRefused      = "connection_refused"      // the fleet proxy refused the connection
	psConnTimeout      = "connection_timeout"      // the fleet proxy did not answer in time
	psDestUnavailable  = "destination_unavailable" // the fleet proxy could not reach the site
	psConnTerminated   = "connection_terminated"   // the fleet proxy closed the connection
)

// gatewayError is an answer the gateway makes itself. Its detail must never carry a fleet
// proxy's credentials: it is built from the gateway's own words, proxy names and the lease
// service's messages, never from an error that may quote a proxy URL.
type gatewayError struct {
	status   int
	kind     string // an RFC 9209 error type
	detail   string
	received int // the next hop's status, 0 when none
}

// proxyStatus is the Proxy-Status field value.
func (e gatewayError) proxyStatus() string {
	var b strings.Builder
	b.WriteString(proxyName)
	b.WriteString("; error=")
	b.WriteString(e.kind)
	if e.received != 0 {
		b.WriteString("; received-status=")
		b.WriteString(strconv.Itoa(e.received))
	}
	if e.detail != "" {
		b.WriteString("; details=")
		b.WriteString(sfString(e.detail))
	}
	return b.String()
}

// sfString is s as a structured-field string (RFC 8941 §3.3.3): printable ASCII only, quotes
// and backslashes escaped; anything else becomes '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s) && i < 512; i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// write answers with e: Proxy-Status, a plain-text body saying the same, and the connection
// closed (a failed CONNECT leaves nothing to reuse it for).
func (e gatewayError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Proxy-Status", e.proxyStatus())
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Connection", "close")
	if e.status == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Basic realm="egressd gateway"`)
	}
	w.WriteHeader(e.status)
	_, _ = io.WriteString(w, "egressd gateway: "+e.detail+"\n")
}
