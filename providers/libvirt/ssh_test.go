package libvirt

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt/libvirttest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egressd/egressd/providers"
)

// sshServer is an in-process SSH server that forwards direct-streamlocal@openssh.com
// channels to unix sockets, as sshd does with AllowStreamLocalForwarding.
type sshServer struct {
	t          *testing.T
	ln         net.Listener
	hostKeys   []ssh.Signer
	authorized ssh.PublicKey
	prohibit   bool // refuse streamlocal forwarding, as sshd configured against it does

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newSignerEd25519(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

func startSSHServer(t *testing.T, authorized ssh.PublicKey, hostKeys ...ssh.Signer) *sshServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sshServer{t: t, ln: ln, hostKeys: hostKeys, authorized: authorized}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.stop)
	return s
}

func (s *sshServer) addr() string { return s.ln.Addr().String() }

func (s *sshServer) stop() {
	s.ln.Close()
	s.dropAll()
	s.wg.Wait()
}

// dropAll cuts every connection, as a host that goes away does.
func (s *sshServer) dropAll() {
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

func (s *sshServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

func (s *sshServer) handle(c net.Conn) {
	defer c.Close()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if s.authorized != nil && string(key.Marshal()) == string(s.authorized.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("key not authorized")
	}}
	for _, k := range s.hostKeys {
		cfg.AddHostKey(k)
	}
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs) // answers keepalives with "failure", which is an answer
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			nc.Reject(ssh.UnknownChannelType, "only streamlocal here")
			continue
		}
		var req struct {
			Path      string
			Reserved0 string
			Reserved1 uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &req); err != nil {
			nc.Reject(ssh.ConnectionFailed, "bad request")
			continue
		}
		if s.prohibit {
			nc.Reject(ssh.Prohibited, "streamlocal forwarding is disabled")
			continue
		}
		uc, err := net.Dial("unix", req.Path)
		if err != nil {
			nc.Reject(ssh.ConnectionFailed, "connect failed: "+err.Error())
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			uc.Close()
			continue
		}
		go ssh.DiscardRequests(creqs)
		wg.Add(2)
		go func() { defer wg.Done(); io.Copy(uc, ch); uc.Close() }()
		go func() { defer wg.Done(); io.Copy(ch, uc); ch.Close() }()
	}
}

// serveMockLibvirt serves go-libvirt's mock libvirtd on a real unix socket.
func serveMockLibvirt(t *testing.T) string {
	dir, err := os.MkdirTemp("", "lv") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "libvirt-sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait(); os.RemoveAll(dir) })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mc, err := libvirttest.New().Dial()
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { io.Copy(mc, c); mc.Close() })
			wg.Go(func() { io.Copy(c, mc); c.Close() })
		}
	})
	return path
}

// sshFixture is a server, a libvirt socket behind it, and the files a provider reads.
type sshFixture struct {
	srv        *sshServer
	socket     string
	dir        string
	keyFile    string
	knownHosts string
	hostKey    ssh.Signer
	clientKey  ssh.Signer
}

func newSSHFixture(t *testing.T) *sshFixture {
	f := &sshFixture{dir: t.TempDir(), socket: serveMockLibvirt(t)}
	var clientPriv ed25519.PrivateKey
	f.clientKey, clientPriv = newSignerEd25519(t)
	f.hostKey, _ = newSignerEd25519(t)
	f.srv = startSSHServer(t, f.clientKey.PublicKey(), f.hostKey)
	f.keyFile = filepath.Join(f.dir, "id_ed25519")
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.keyFile, pem.EncodeToMemory(block))
	f.knownHosts = filepath.Join(f.dir, "known_hosts")
	writeFile(t, f.knownHosts, []byte(knownhosts.Line([]string{f.srv.addr()}, f.hostKey.PublicKey())+"\n"))
	return f
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *sshFixture) config() Config {
	cfg := testConfig("https://images.example/tiny.qcow2", "")
	cfg.SSHKeyFile, cfg.KnownHostsFile, cfg.InsecureIgnoreHostKey = f.keyFile, f.knownHosts, false
	cfg.Hosts[0].Address, cfg.Hosts[0].Socket = f.srv.addr(), f.socket
	cfg.Budgets.Dial = Duration(2 * time.Second)
	cfg.Budgets.RPC = Duration(2 * time.Second)
	return cfg
}

func (f *sshFixture) provider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New("lv", cfg, nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The whole way: TCP, SSH with a pinned host key and a client key, a direct-streamlocal channel
// to a real unix socket, and go-libvirt's handshake with the libvirtd behind it.
func TestSSHTransportReachesLibvirt(t *testing.T) {
	f := newSSHFixture(t)
	p := f.provider(t, f.config())
	c, err := p.hosts["h1"].get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.LibVersion(context.Background()); err != nil || v != 1003004 {
		t.Fatalf("LibVersion over SSH = %d, %v", v, err)
	}
	if pool, err := c.LookupPool(context.Background(), "default"); err != nil || pool.Name != "default" {
		t.Errorf("LookupPool over SSH = %+v, %v", pool, err)
	}
	again, err := p.hosts["h1"].get(context.Background())
	if err != nil || again != c {
		t.Errorf("the pooled connection was not reused: %v", err)
	}
	fresh, err := p.hosts["h1"].fresh(context.Background())
	if err != nil || fresh == c {
		t.Fatalf("fresh = %v, %v; want a connection of its own", fresh, err)
	}
	fresh.Close()
	if !c.Alive() || fresh.Alive() {
		t.Error("closing the dedicated connection touched the pooled one")
	}

	// The host goes away: the link notices, and the next call redials.
	f.srv.dropAll()
	deadline := time.Now().Add(5 * time.Second)
	for c.Alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Alive() {
		t.Fatal("the link did not notice its host went away")
	}
	c2, err := p.hosts["h1"].get(context.Background())
	if err != nil || c2 == c {
		t.Fatalf("redial = %v, %v", c2, err)
	}
	if _, err := c2.LibVersion(context.Background()); err != nil {
		t.Errorf("LibVersion after the redial: %v", err)
	}
}

// Keepalives are answered by any SSH server, so a healthy idle link stays up.
func TestKeepaliveKeepsAHealthyLink(t *testing.T) {
	f := newSSHFixture(t)
	cfg := f.config()
	cfg.Budgets.Keepalive = Duration(50 * time.Millisecond)
	p := f.provider(t, cfg)
	c, err := p.hosts["h1"].fresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	if !c.Alive() {
		t.Fatalf("keepalives killed a healthy link: %s", c.(*rpcConn).l.reason())
	}
}

// Every stage of a dial that can fail, with its class: what a human must fix is Permanent,
// what may fix itself is Transient.
func TestSSHDialStages(t *testing.T) {
	f := newSSHFixture(t)
	otherKey, _ := newSignerEd25519(t)
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	mute, _ := net.Listen("tcp", "127.0.0.1:0") // accepts and never speaks
	t.Cleanup(func() { mute.Close() })
	var muteConns []net.Conn
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			muteConns = append(muteConns, c)
		}
	}()
	garbage, _ := net.Listen("tcp", "127.0.0.1:0") // not SSH at all
	t.Cleanup(func() { garbage.Close() })
	go func() {
		for {
			c, err := garbage.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	refusing := startSSHServer(t, otherKey.PublicKey(), f.hostKey)
	prohibiting := startSSHServer(t, f.clientKey.PublicKey(), f.hostKey)
	prohibiting.prohibit = true
	pin := func(addrs ...string) string {
		path := filepath.Join(t.TempDir(), "known_hosts")
		var lines []string
		for _, a := range addrs {
			lines = append(lines, knownhosts.Line([]string{a}, f.hostKey.PublicKey()))
		}
		writeFile(t, path, []byte(strings.Join(lines, "\n")+"\n"))
		return path
	}
	changed := filepath.Join(t.TempDir(), "known_hosts")
	writeFile(t, changed, []byte(knownhosts.Line([]string{f.srv.addr()}, otherKey.PublicKey())+"\n"))
	garbageKey := filepath.Join(t.TempDir(), "id")
	writeFile(t, garbageKey, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnope\n-----END OPENSSH PRIVATE KEY-----\n"))

	for _, c := range []struct {
		name   string
		mutate func(*Config)
		stage  string
		class  error
		says   string
	}{
		{"tcp refused", func(c *Config) { c.Hosts[0].Address = closedAddr }, stageTCP, providers.ErrTransient, "refused"},
		{"not ssh", func(c *Config) { c.Hosts[0].Address = garbage.Addr().String() }, stageSSH, providers.ErrTransient, ""},
		{"silent server", func(c *Config) {
			c.Hosts[0].Address, c.Budgets.Dial = mute.Addr().String(), Duration(300*time.Millisecond)
		}, stageSSH, providers.ErrTransient, ""},
		{"unknown host key", func(c *Config) { c.KnownHostsFile = pin("127.0.0.1:1") }, stageSSH, providers.ErrPermanent, "not in knownHostsFile"},
		{"changed host key", func(c *Config) { c.KnownHostsFile = changed }, stageSSH, providers.ErrPermanent, "does not match knownHostsFile"},
		{"refused client key", func(c *Config) {
			c.Hosts[0].Address, c.KnownHostsFile = refusing.addr(), pin(refusing.addr())
		}, stageSSH, providers.ErrPermanent, "SSH key refused"},
		{"missing key file", func(c *Config) { c.SSHKeyFile = filepath.Join(t.TempDir(), "none") }, stageCredentials, providers.ErrTransient, "sshKeyFile"},
		{"missing known_hosts", func(c *Config) { c.KnownHostsFile = filepath.Join(t.TempDir(), "none") }, stageCredentials, providers.ErrTransient, "knownHostsFile"},
		{"unparsable key", func(c *Config) { c.SSHKeyFile = garbageKey }, stageCredentials, providers.ErrPermanent, "sshKeyFile"},
		{"no libvirt socket", func(c *Config) { c.Hosts[0].Socket = "/nonexistent/libvirt-sock" }, stageSocket, providers.ErrTransient, "connect failed"},
		{"forwarding prohibited", func(c *Config) {
			c.Hosts[0].Address, c.KnownHostsFile = prohibiting.addr(), pin(prohibiting.addr())
		}, stageSocket, providers.ErrPermanent, "disabled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := f.config()
			c.mutate(&cfg)
			p := f.provider(t, cfg)
			start := time.Now()
			_, err := p.Get(context.Background(), idOf("h1", "egress-abc"))
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
			var de *dialError
			if !errors.As(err, &de) || de.Stage != c.stage {
				t.Fatalf("Get = %v, want a dial error at the %s stage", err, c.stage)
			}
			wantClass(t, "Get", err, c.class)
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
			if ts := p.Check(context.Background()); ts[0].Ready || ts[0].Reason == "" {
				t.Errorf("Check = %+v", ts[0])
			}
		})
	}
}
