package forwardproxy

import (
	"net/http"

	"github.com/egressd/egressd/internal/relay"
)

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
	relay.RemoveHopHeaders(out.Header)
	relay.RemoveProxyHeaders(out.Header)
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

	relay.RemoveHopHeaders(resp.Header)
	for k, vv := range resp.Header {
		w.Header()[k] = append(w.Header()[k], vv...)
	}
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.bytes, _ = relay.CopyBody(w, resp.Body, resp.ContentLength < 0)
}
