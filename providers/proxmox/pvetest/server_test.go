package pvetest

import (
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNewRejectsBadOptions(t *testing.T) {
	ok := func() Options { return Options{Addresses: pool(1), Serve: serveForwardProxy} }
	tests := []struct {
		name  string
		edit  func(*Options)
		field string
	}{
		{"no addresses", func(o *Options) { o.Addresses = nil }, "Addresses"},
		{"public address", func(o *Options) { o.Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.1")} }, "Addresses"},
		{"no proxy", func(o *Options) { o.Serve = nil }, "Serve"},
		{"bad node", func(o *Options) { o.Nodes = []string{"pv 1"} }, "Nodes"},
		{"repeated node", func(o *Options) { o.Nodes = []string{"a", "a"} }, "Nodes"},
		{"bad storage", func(o *Options) { o.Storages = []Storage{{ID: "1x"}} }, "Storages"},
		{"bad token", func(o *Options) { o.Tokens = []Token{{ID: "root", Secret: "x"}} }, "Tokens"},
		{"empty secret", func(o *Options) { o.Tokens = []Token{{ID: "a@pve!b"}} }, "Tokens"},
		{"template VMID", func(o *Options) { o.Templates = []Template{{VMID: 99}} }, "VMID"},
		{"template twice", func(o *Options) { o.Templates = []Template{{VMID: 9001}, {VMID: 9001}} }, "twice"},
		{"template node", func(o *Options) { o.Templates = []Template{{VMID: 9001, Node: "elsewhere"}} }, "Node"},
		{"template storage", func(o *Options) { o.Templates = []Template{{VMID: 9001, Storage: "local"}} }, "Storage"},
		{"template MAC", func(o *Options) { o.Templates = []Template{{VMID: 9001, MAC: "nope"}} }, "MAC"},
		{"contention", func(o *Options) { o.CloneContention = -1 }, "CloneContention"},
		{"listen", func(o *Options) { o.Listen = "not an address" }, "Listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok()
			tt.edit(&o)
			s, err := New(o)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
		})
	}
}

// Defaults: a random token (Token() is the token file's content), F19's template, no TLS.
func TestDefaults(t *testing.T) {
	s, err := New(Options{Addresses: pool(1), Serve: serveForwardProxy})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, secret, _ := strings.Cut(s.Token(), "=")
	if id != "egressd@pve!egressd" || len(secret) != 36 {
		t.Errorf("token %q", s.Token())
	}
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || s.CACertPEM() != nil || s.CertPool() != nil {
		t.Errorf("URL %s", s.URL())
	}
	v, ok := s.VM(9001)
	if !ok || !v.Template || v.Node != "pv1-1" || v.Config["boot"] != "order=scsi0" || v.Config["agent"] != "1" ||
		v.Config["scsi0"] != "local-lvm:base-9001-disk-0,size=3G" || !strings.HasSuffix(v.Config["net0"], ",bridge=vmbr0") {
		t.Errorf("template %+v", v)
	}
}

// Close in the middle of a clone, a queued start and a boot leaves nothing running
// (TestMain's goleak checks the goroutines, this the proxy and the auth files).
func TestCloseMidFlight(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Timing.Boot = time.Hour })
	e.booted0(t, 101600)
	e.c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(101601, "proxy-unfinished"))
	e.c.upid("POST", vmPath(101601)+"/status/start", nil)
	e.sim.Close()
	e.sim.Close()
	if !refused(netip.AddrPortFrom(pool(1)[0], proxyPort)) {
		t.Error("a proxy listens after Close")
	}
}

// booted0 starts a clone with a seed and waits for the start task, not the boot.
func (e *env) booted0(t *testing.T, id int) {
	t.Helper()
	e.cloned(t, id, "proxy-close")
	e.c.wait(e.c.upload(node, "local", "c.iso", buildSeed(t, seedFiles{name: "c", port: proxyPort})))
	e.c.data("PUT", vmPath(id)+"/config", url.Values{"ide2": {"local:iso/c.iso,media=cdrom"}}, nil)
	e.c.ok("POST", vmPath(id)+"/status/start", nil)
}

// Close with proxies running stops them and removes their auth files.
func TestCloseStopsProxies(t *testing.T) {
	e := newEnv(t, nil)
	ip := e.booted(t, 101700, "proxy-closing", authLine(t, "u", "p"))
	dir := e.sim.dir
	e.sim.Close()
	if !refused(netip.AddrPortFrom(ip, proxyPort)) {
		t.Error("proxy listens after Close")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("auth dir %s left behind", dir)
	}
}
