package pvetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdomanski/iso9660"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

const (
	node      = "pv1-1"
	tmplID    = 9001
	proxyPort = 18104 // on 127.0.104.x, this package's loopback net
)

func pool(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, 0, 104, byte(i + 10)})
	}
	return out
}

// serveForwardProxy runs egressd's own forward proxy, the one the guest image runs, with the
// credential the seed delivered.
func serveForwardProxy(ctx context.Context, ln net.Listener, p Proxy) error {
	return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), AuthFile: p.AuthFile})
}

// fastTiming keeps every asynchronous step visible yet short.
var fastTiming = Timing{Clone: 30 * time.Millisecond, Task: 5 * time.Millisecond, Boot: 30 * time.Millisecond}

type env struct {
	sim *Server
	c   *client
}

func newEnv(t *testing.T, mutate func(*Options)) *env {
	t.Helper()
	opts := Options{Addresses: pool(4), Serve: serveForwardProxy, Timing: fastTiming,
		Listen: "127.0.104.1:0", Tokens: []Token{{ID: "egressd@pve!prov", Secret: "5d1e0b8c-6f0a-4c39-9a57-2b8f3e7d1c40"}}}
	if mutate != nil {
		mutate(&opts)
	}
	sim, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	tr := &http.Transport{}
	if opts.TLS {
		tr.TLSClientConfig = tlsConfig(sim)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &env{sim: sim, c: &client{t: t, base: sim.URL() + "/api2/json", token: sim.Token(),
		hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}}
}

// client is a plain net/http client speaking the PVE API, as any provider would.
type client struct {
	t     *testing.T
	base  string
	token string // user@realm!tokenid=secret; "" sends no Authorization
	hc    *http.Client
}

type reply struct {
	resp *http.Response
	body []byte
}

func (c *client) do(method, path string, form url.Values) reply {
	c.t.Helper()
	var body io.Reader
	target := c.base + path
	if form != nil && (method == http.MethodGet || method == http.MethodDelete) {
		target += "?" + form.Encode()
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return c.send(req)
}

func (c *client) send(req *http.Request) reply {
	c.t.Helper()
	if c.token != "" {
		req.Header.Set("Authorization", "PVEAPIToken="+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: body: %v", req.Method, req.URL.Path, err)
	}
	return reply{resp, b}
}

// data calls and decodes the {"data": …} envelope of a 200 into out.
func (c *client) data(method, path string, form url.Values, out any) {
	c.t.Helper()
	r := c.do(method, path, form)
	if r.resp.StatusCode != 200 {
		c.t.Fatalf("%s %s: %s %s", method, path, r.resp.Status, r.body)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		c.t.Fatalf("%s %s: not an envelope: %s", method, path, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			c.t.Fatalf("%s %s: data %s: %v", method, path, env.Data, err)
		}
	}
}

// upid calls an asynchronous endpoint and answers its UPID.
func (c *client) upid(method, path string, form url.Values) string {
	c.t.Helper()
	var u string
	c.data(method, path, form, &u)
	if _, err := ParseUPID(u); err != nil {
		c.t.Fatalf("%s %s answered %q: %v", method, path, u, err)
	}
	return u
}

type taskStatus struct {
	UPID       string `json:"upid"`
	Node       string `json:"node"`
	PID        int64  `json:"pid"`
	PStart     int64  `json:"pstart"`
	StartTime  int64  `json:"starttime"`
	Type       string `json:"type"`
	ID         string `json:"id"`
	User       string `json:"user"`
	TokenID    string `json:"tokenid"`
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
}

// wait polls the task until it stops and answers its exitstatus.
func (c *client) wait(upid string) string {
	c.t.Helper()
	u, _ := ParseUPID(upid)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st taskStatus
		c.data("GET", "/nodes/"+u.Node+"/tasks/"+url.PathEscape(upid)+"/status", nil, &st)
		if st.Status == TaskStopped {
			return st.ExitStatus
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s still running", upid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ok runs an asynchronous call to the end and fails unless its task ends OK.
func (c *client) ok(method, path string, form url.Values) {
	c.t.Helper()
	if exit := c.wait(c.upid(method, path, form)); exit != ExitOK {
		c.t.Fatalf("%s %s: task ended %q", method, path, exit)
	}
}

// wantError checks the F1 shape: the text in the status line and in the body's message
// ending "\n"; with errs, the 400 errors map has those keys.
func (r reply) wantError(t *testing.T, status int, msg string, errKeys ...string) {
	t.Helper()
	if r.resp.StatusCode != status {
		t.Fatalf("status %q, want %d %s; body %s", r.resp.Status, status, msg, r.body)
	}
	if r.resp.Status != fmt.Sprintf("%d %s", status, msg) {
		t.Errorf("status line %q, want the text %q in it (F1)", r.resp.Status, msg)
	}
	var doc struct {
		Data    any               `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if doc.Message != msg+"\n" || doc.Data != nil {
		t.Errorf("body %s, want message %q and data null (F1)", r.body, msg+"\n")
	}
	for _, k := range errKeys {
		if doc.Errors[k] == "" {
			t.Errorf("errors %v lack %q", doc.Errors, k)
		}
	}
	if len(errKeys) == 0 && doc.Errors != nil {
		t.Errorf("errors %v on a non-parameter error", doc.Errors)
	}
}

// seedFiles is a NoCloud seed as egressd builds one (providers/libvirt/seed.go).
type seedFiles struct {
	label string // default cidata
	name  string
	port  int
	auth  string // an auth-file line; "" for none
	skip  bool   // leave egressd.json out
}

// buildSeed writes the ISO. user, pass non-empty: auth from forwardproxy.WriteAuthFile.
func buildSeed(t *testing.T, f seedFiles) []byte {
	t.Helper()
	w, err := iso9660.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cleanup()
	doc, _ := json.Marshal(map[string]any{"v": 1, "name": f.name, "port": f.port, "auth": f.auth})
	files := map[string]string{
		"user-data":   "#cloud-config\n",
		"meta-data":   "instance-id: " + f.name + "\nlocal-hostname: " + f.name + "\n",
		"vendor-data": "",
	}
	if !f.skip {
		files["egressd.json"] = string(doc) + "\n"
	}
	for name, data := range files {
		if err := w.AddFile(strings.NewReader(data), name); err != nil {
			t.Fatal(err)
		}
	}
	label := f.label
	if label == "" {
		label = "cidata"
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, label); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// authLine is the line egressd.json carries for user and pass.
func authLine(t *testing.T, user, pass string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth")
	if err := forwardproxy.WriteAuthFile(p, user, pass); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// uploadRequest is F12's multipart upload.
func (c *client) uploadRequest(node, storage, content, filename string, data []byte) *http.Request {
	c.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if content != "" {
		mw.WriteField("content", content)
	}
	fw, err := mw.CreateFormFile("filename", filename)
	if err != nil {
		c.t.Fatal(err)
	}
	fw.Write(data)
	mw.Close()
	req, err := http.NewRequest("POST", c.base+"/nodes/"+node+"/storage/"+storage+"/upload", &body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return req
}

func (c *client) upload(node, storage, filename string, data []byte) string {
	c.t.Helper()
	r := c.send(c.uploadRequest(node, storage, "iso", filename, data))
	if r.resp.StatusCode != 200 {
		c.t.Fatalf("upload: %s %s", r.resp.Status, r.body)
	}
	var env struct{ Data string }
	json.Unmarshal(r.body, &env)
	return env.Data
}

func vmPath(vmid int) string { return fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid) }

// cloneReq is the provider's clone call (docs/providers/proxmox.md).
func cloneReq(newid int, name string, extra ...string) url.Values {
	v := url.Values{"newid": {fmt.Sprint(newid)}, "name": {name},
		"description": {"proxy-operator-managed=true\nproxy-operator-uid=" + name + "\n"}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return v
}

// cloned clones the template onto newid and waits for the task.
func (e *env) cloned(t *testing.T, newid int, name string) {
	t.Helper()
	e.c.ok("POST", vmPath(tmplID)+"/clone", cloneReq(newid, name))
}

// booted clones, seeds, configures and starts newid, then waits for the agent's address.
func (e *env) booted(t *testing.T, newid int, name, auth string) netip.Addr {
	t.Helper()
	e.cloned(t, newid, name)
	iso := buildSeed(t, seedFiles{name: name, port: proxyPort, auth: auth})
	if exit := e.c.wait(e.c.upload(node, "local", name+"-seed.iso", iso)); exit != ExitOK {
		t.Fatalf("upload: %s", exit)
	}
	e.c.data("PUT", vmPath(newid)+"/config", url.Values{"ide2": {"local:iso/" + name + "-seed.iso,media=cdrom"}}, nil)
	e.c.ok("POST", vmPath(newid)+"/status/start", nil)
	return e.c.agentAddr(newid)
}

type agentIface struct {
	Name    string `json:"name"`
	HW      string `json:"hardware-address"`
	Address []struct {
		IP     string `json:"ip-address"`
		Type   string `json:"ip-address-type"`
		Prefix int    `json:"prefix"`
	} `json:"ip-addresses"`
}

// agentAddr polls the agent until it answers and answers eth0's IPv4.
func (c *client) agentAddr(vmid int) netip.Addr {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := c.do("GET", vmPath(vmid)+"/agent/network-get-interfaces", nil)
		if r.resp.StatusCode == 200 {
			var env struct {
				Data struct {
					Result []agentIface `json:"result"`
				} `json:"data"`
			}
			if err := json.Unmarshal(r.body, &env); err != nil {
				c.t.Fatal(err)
			}
			for _, i := range env.Data.Result {
				if i.Name == "eth0" {
					for _, a := range i.Address {
						if a.Type == "ipv4" {
							return netip.MustParseAddr(a.IP)
						}
					}
				}
			}
			c.t.Fatalf("agent answered no eth0 IPv4: %s", r.body)
		}
		if !strings.Contains(r.resp.Status, msgAgentNotRunning) || time.Now().After(deadline) {
			c.t.Fatalf("agent: %s %s", r.resp.Status, r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fetchThrough gets site through the forward proxy at addr, with user:pass when user is set.
func fetchThrough(t *testing.T, addr netip.AddrPort, site, user, pass string) (int, string, error) {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: addr.String()}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(site)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// refused reports whether nothing listens at addr.
func refused(addr netip.AddrPort) bool {
	c, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}
