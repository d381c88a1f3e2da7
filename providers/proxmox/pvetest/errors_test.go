package pvetest

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// F22: the token header is checked on every request; 401 has the text in the reason phrase
// and an empty body (F1). Source: F22, F1.
func TestAuthentication(t *testing.T) {
	e := newEnv(t, nil)
	good := e.c.token
	tests := []struct {
		name   string
		header string // "" sends none
		status int
		reason string
	}{
		{"valid token", "PVEAPIToken=" + good, 200, "OK"},
		{"no header", "", 401, msgNoTicket},
		{"not a token", "Bearer " + good, 401, msgNoTicket},
		{"wrong secret", "PVEAPIToken=egressd@pve!prov=00000000-0000-4000-8000-000000000000", 401, msgAuthFailed},
		{"unknown token id", "PVEAPIToken=egressd@pve!other=" + strings.SplitN(good, "=", 2)[1], 401, msgAuthFailed},
		{"no secret", "PVEAPIToken=egressd@pve!prov", 401, msgAuthFailed},
		{"no token id", "PVEAPIToken=egressd@pve=x", 401, msgAuthFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.c.base+"/version", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := e.c.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := make([]byte, 1)
			n, _ := resp.Body.Read(body)
			if resp.Status != strconv.Itoa(tt.status)+" "+tt.reason {
				t.Fatalf("status %q, want %d %s", resp.Status, tt.status, tt.reason)
			}
			if tt.status == 401 && n != 0 {
				t.Errorf("401 with a body (F22: empty)")
			}
		})
	}
}

// F1 through a plain net/http client: the error text is in resp.Status and in the body's
// message ending "\n"; a 400 adds errors naming the fields. Sources: F1, F2; the API viewer's
// parameter schemas (https://pve.proxmox.com/pve-docs/api-viewer/).
func TestErrorShapes(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name   string
		method string
		path   string
		form   url.Values
		status int
		msg    string
		keys   []string
	}{
		{"F2 missing VM config", "GET", vmPath(999999) + "/config", nil, 500,
			"Configuration file 'nodes/pv1-1/qemu-server/999999.conf' does not exist", nil},
		{"clone without newid", "POST", vmPath(tmplID) + "/clone", url.Values{"name": {"x"}}, 400,
			"Parameter verification failed.", []string{"newid"}},
		{"clone with an unknown parameter", "POST", vmPath(tmplID) + "/clone", url.Values{"newid": {"100"}, "colour": {"red"}}, 400,
			"Parameter verification failed.", []string{"colour"}},
		{"newid below 100", "POST", vmPath(tmplID) + "/clone", url.Values{"newid": {"99"}}, 400,
			"Parameter verification failed.", []string{"newid"}},
		{"vmid not a number", "GET", "/nodes/pv1-1/qemu/abc/config", nil, 400,
			"Parameter verification failed.", []string{"vmid"}},
		{"unknown path", "GET", "/nodes/pv1-1/frobnicate", nil, 501,
			"Method 'GET /api2/json/nodes/pv1-1/frobnicate' not implemented", nil},
		{"unknown node", "GET", "/nodes/pv9-9/status", nil, 500,
			"hostname lookup 'pv9-9' failed - failed to get address info for: pv9-9: Name or service not known", nil},
		{"malformed UPID", "GET", "/nodes/pv1-1/tasks/UPID:nope/status", nil, 400,
			"Parameter verification failed.", []string{"upid"}},
		{"unknown UPID", "GET", "/nodes/pv1-1/tasks/" + url.PathEscape("UPID:pv1-1:00000001:00000002:00000003:qmstart:100:root@pam:") + "/status", nil, 400,
			"Parameter verification failed.", []string{"upid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.c.do(tt.method, tt.path, tt.form).wantError(t, tt.status, tt.msg, tt.keys...)
		})
	}
}

// 595/596: pveproxy cannot reach the node; the text is the reason phrase, no body. Calls not
// proxied to the node still answer, and cluster/resources shows it offline. Source:
// pveproxy's forwarding errors and reports of "595 No route to host".
func TestNodeDown(t *testing.T) {
	for _, code := range []int{StatusNoRoute, StatusTimedOut} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			e := newEnv(t, nil)
			if err := e.sim.SetNodeDown(node, code); err != nil {
				t.Fatal(err)
			}
			r := e.c.do("GET", vmPath(tmplID)+"/status/current", nil)
			want := map[int]string{595: "595 No route to host", 596: "596 Connection timed out"}[code]
			if r.resp.Status != want || len(r.body) != 0 {
				t.Fatalf("%q %q, want %q and no body", r.resp.Status, r.body, want)
			}
			var res []map[string]any
			e.c.data("GET", "/cluster/resources", nil, &res)
			for _, x := range res {
				switch {
				case x["type"] == "node" && x["status"] != "offline":
					t.Errorf("node entry %v, want offline", x)
				case x["type"] == "qemu" && x["status"] != "unknown":
					t.Errorf("VM entry %v, want unknown", x)
				}
			}
			if err := e.sim.SetNodeDown(node, 0); err != nil {
				t.Fatal(err)
			}
			e.c.data("GET", vmPath(tmplID)+"/status/current", nil, nil)
		})
	}
	e := newEnv(t, nil)
	if err := e.sim.SetNodeDown(node, 500); err == nil {
		t.Error("SetNodeDown accepted 500")
	}
	if err := e.sim.SetNodeDown("pv9-9", 595); err == nil {
		t.Error("SetNodeDown accepted an unknown node")
	}
}

// F18: HTTP/1.1 only, also over TLS (no h2 in ALPN); the error's reason phrase survives TLS.
func TestTLSIsHTTP11(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.TLS = true })
	if !strings.HasPrefix(e.sim.URL(), "https://") || len(e.sim.CACertPEM()) == 0 {
		t.Fatalf("URL %s, CA %d bytes", e.sim.URL(), len(e.sim.CACertPEM()))
	}
	tr := e.c.hc.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = true
	tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}
	r := e.c.do("GET", "/version", nil)
	if r.resp.ProtoMajor != 1 || r.resp.TLS == nil || r.resp.TLS.NegotiatedProtocol == "h2" {
		t.Fatalf("proto %s, ALPN %q", r.resp.Proto, r.resp.TLS.NegotiatedProtocol)
	}
	e.c.do("GET", vmPath(999999)+"/config", nil).wantError(t, 500,
		"Configuration file 'nodes/pv1-1/qemu-server/999999.conf' does not exist")
}

// An error answered before the request body was read (an upload with a wrong token) still
// reaches the client intact, not as a connection reset.
func TestErrorBeforeBodyIsRead(t *testing.T) {
	e := newEnv(t, nil)
	bad := &client{t: t, base: e.c.base, token: "egressd@pve!prov=wrong", hc: e.c.hc}
	req := bad.uploadRequest(node, "local", "iso", "big.iso", make([]byte, 8<<20))
	r := bad.send(req)
	if r.resp.Status != "401 Authentication failed!" {
		t.Fatalf("status %q", r.resp.Status)
	}
	e.c.data("GET", "/version", nil, nil) // the client's connections are still usable
}
