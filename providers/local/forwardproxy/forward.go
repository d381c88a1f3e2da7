package forwardproxy

import (
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders concern one connection, not the request; Proxy-Authorization is ours and must
// not reach the site.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeProxyHeaders drops every request header named Proxy-*: by convention they are meant
// for a proxy (credentials, connection options, a client's proxy hints), never for the site,
// and one passed on tells the site a proxy is in the way.
func removeProxyHeaders(h http.Header) {
	for name := range h {
		if len(name) > len("Proxy-") && strings.EqualFold(name[:len("Proxy-")], "Proxy-") {
			delete(h, name)
		}
	}
}

func removeHopHeaders(h http.Header) {
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

// forward relays an absolute-form request. It deliberately does not use
// httputil.ReverseProxy, whose defaults add X-Forwarded-For: the proxy is elite, the site
// sees no Via, X-Forwarded-For, Forwarded or Proxy-* header and no address but the egress one.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, rec *record) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = false
	if r.ContentLength == 0 {
		// An empty body must not be sent as a chunked one of unknown length.
		out.Body = nil
	}
	removeHopHeaders(out.Header)
	removeProxyHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		// Otherwise the transport announces itself as Go-http-client.
		out.Header.Set("User-Agent", "")
	}

	resp, err := h.transport.RoundTrip(out)
	if err != nil {
		rec.fail(w, upstreamStatus(err), "upstream "+r.URL.Host+": "+err.Error())
		return
	}
	defer resp.Body.Close()

	removeHopHeaders(resp.Header)
	for k, vv := range resp.Header {
		w.Header()[k] = append(w.Header()[k], vv...)
	}
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.bytes, _ = copyBody(w, resp.Body, resp.ContentLength < 0)
}

// copyBody streams body to w; a body of unknown length (event streams, long polls) is flushed
// as it comes rather than when the server's buffer fills.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) (int64, error) {
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
			rc.Flush()
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
