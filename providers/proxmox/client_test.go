package proxmox

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

// The token file is read on every request: a rotated token is used at once, a missing file
// is Transient (a secret being mounted), a malformed one Permanent; its content is in no error.
func TestTokenReadPerRequest(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, `{"data":{"version":"9.2.20"}}`)
	}))
	t.Cleanup(srv.Close)
	c := testClient(t, srv.URL)
	get := func() error { return c.do(context.Background(), call{method: http.MethodGet, path: "/version"}, nil) }
	if err := get(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(c.tokenFile, []byte("egressd@pve!prov=rotated-secret"), 0o600)
	if err := get(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != "PVEAPIToken=egressd@pve!prov=00000000-0000-0000-0000-000000000000" || seen[1] != "PVEAPIToken=egressd@pve!prov=rotated-secret" {
		t.Errorf("Authorization headers %q", seen)
	}
	p := &Provider{name: "pve"}
	for _, bad := range []string{"SENTINEL-no-separators", "egressd@pve!prov", "egressdpve!prov=SENTINEL", "egressd@pve!prov=SEN TINEL", "egressd@pve!=SENTINEL"} {
		os.WriteFile(c.tokenFile, []byte(bad), 0o600)
		err := get()
		if !errors.Is(err, errTokenMalformed) || providers.ClassOf(p.classify(opGet, "x", err)) != providers.ErrPermanent {
			t.Errorf("token %q: %v, want Permanent malformed", bad, err)
		}
		if strings.Contains(err.Error(), "SENTINEL") || strings.Contains(err.Error(), "TINEL") {
			t.Errorf("the token's content is in the error: %v", err)
		}
	}
	os.Remove(c.tokenFile)
	if err := get(); !errors.Is(err, errTokenUnreadable) || providers.ClassOf(p.classify(opGet, "x", err)) != providers.ErrTransient {
		t.Errorf("missing token file: %v, want Transient unreadable", err)
	}
	if len(seen) != 2 {
		t.Errorf("requests went out without a valid token: %d", len(seen))
	}
}

// HTTP/1.1 only (F18), and a caFile is how the server's certificate is trusted.
func TestTLSWithCAFileSpeaksHTTP1(t *testing.T) {
	var proto string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto = r.Proto
		io.WriteString(w, `{"data":{"version":"9.2.20"}}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("egressd@pve!prov=s"), 0o600)
	cfg := validConfig()
	cfg.URL, cfg.TokenFile, cfg.CAFile = srv.URL, tok, ca
	c, err := newClient(cfg.settings(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	var v version
	if err := c.do(context.Background(), call{method: http.MethodGet, path: "/version"}, &v); err != nil || v.Version != "9.2.20" {
		t.Fatalf("version = %+v, %v", v, err)
	}
	if proto != "HTTP/1.1" {
		t.Errorf("spoke %s, want HTTP/1.1", proto)
	}
	cfg.CAFile = ""
	c, _ = newClient(cfg.settings(), discardLog())
	if err := c.do(context.Background(), call{method: http.MethodGet, path: "/version"}, nil); err == nil {
		t.Error("an untrusted certificate was accepted without caFile")
	}
	cfg.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := newClient(cfg.settings(), discardLog()); err == nil || !strings.Contains(err.Error(), "caFile") {
		t.Errorf("a missing caFile: %v", err)
	}
}

// The seed goes up as PVE wants it (F12): multipart, content=iso first, then the file part
// named filename with the ISO's name.
func TestUploadMultipart(t *testing.T) {
	var content, filename string
	var data []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		content = r.FormValue("content")
		f, h, err := r.FormFile("filename")
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		filename = h.Filename
		data, _ = io.ReadAll(f)
		io.WriteString(w, `{"data":"UPID:pv1-1:00000001:00000002:00000003:imgcopy::egressd@pve!prov:"}`)
	}))
	t.Cleanup(srv.Close)
	c := testClient(t, srv.URL)
	upid, err := c.upload(context.Background(), "pv1-1", "local", "egress-abc-seed.iso", []byte("ISO BYTES"), uploadBudget)
	if err != nil || !strings.HasPrefix(upid, "UPID:pv1-1:") {
		t.Fatalf("upload = %q, %v", upid, err)
	}
	if content != "iso" || filename != "egress-abc-seed.iso" || string(data) != "ISO BYTES" {
		t.Errorf("content %q filename %q data %q", content, filename, data)
	}
	if n, err := upidNode(upid); err != nil || n != "pv1-1" {
		t.Errorf("upidNode = %q, %v", n, err)
	}
	if _, err := upidNode("UPID:x"); err == nil {
		t.Error("a short UPID parsed")
	}
}

// Against the simulator over https: caFile trusts its certificate; insecureSkipTLSVerify
// works too and is warned about at start.
func TestTLSAgainstSimulator(t *testing.T) {
	sim := newSim(t, pvetest.Options{TLS: true})
	cfg := simConfig(t, sim)
	cfg.CAFile = filepath.Join(t.TempDir(), "pve-root-ca.pem")
	if err := os.WriteFile(cfg.CAFile, sim.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, cfg, nil)
	inst := settle(t, p, mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1")).ID)
	if !strings.HasPrefix(sim.URL(), "https://") || inst.Address == "" {
		t.Fatalf("over %s: %+v", sim.URL(), inst)
	}
	var log providertest.LogBuffer
	cfg.CAFile, cfg.InsecureSkipTLSVerify = "", true
	p = newTestProvider(t, cfg, log.Logger())
	if _, err := p.Get(context.Background(), inst.ID); err != nil {
		t.Errorf("insecureSkipTLSVerify: %v", err)
	}
	if !strings.Contains(log.String(), `level=WARN msg="insecureSkipTLSVerify is set`) {
		t.Errorf("no warning at start:\n%s", log.String())
	}
}
