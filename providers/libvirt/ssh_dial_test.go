package libvirt

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egressd/egressd/providers"
)

// Keys and known_hosts are read on every dial: a key that appears later (a secret mounted
// late, a rotation) is used without a new provider.
func TestCredentialsAreReadOnEveryDial(t *testing.T) {
	f := newSSHFixture(t)
	cfg := f.config()
	late := filepath.Join(t.TempDir(), "id_ed25519")
	cfg.SSHKeyFile = late
	p := f.provider(t, cfg)
	_, err := p.hosts["h1"].get(context.Background())
	wantClass(t, "dial without the key file", p.classify(opGet, "", err), providers.ErrTransient)
	key, _ := os.ReadFile(f.keyFile)
	writeFile(t, late, key)
	c, err := p.hosts["h1"].get(context.Background())
	if err != nil {
		t.Fatalf("dial once the key exists: %v", err)
	}
	if _, err := c.LibVersion(context.Background()); err != nil {
		t.Error(err)
	}
}

// A host offering ed25519 first must still be verified against an RSA-only pin.
func TestRSAOnlyPinAgainstAnEd25519FirstHost(t *testing.T) {
	f := newSSHFixture(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, _ := ssh.NewSignerFromKey(rsaKey)
	srv := startSSHServer(t, f.clientKey.PublicKey(), f.hostKey, rsaSigner)
	cfg := f.config()
	cfg.Hosts[0].Address = srv.addr()
	cfg.KnownHostsFile = filepath.Join(t.TempDir(), "known_hosts")
	writeFile(t, cfg.KnownHostsFile, []byte(knownhosts.Line([]string{srv.addr()}, rsaSigner.PublicKey())+"\n"))
	p := f.provider(t, cfg)
	c, err := p.hosts["h1"].get(context.Background())
	if err != nil {
		t.Fatalf("dial with an RSA pin: %v", err)
	}
	if _, err := c.LibVersion(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestInsecureIgnoreHostKey(t *testing.T) {
	f := newSSHFixture(t)
	cfg := f.config()
	cfg.KnownHostsFile, cfg.InsecureIgnoreHostKey = "", true
	p := f.provider(t, cfg)
	if _, err := p.hosts["h1"].get(context.Background()); err != nil {
		t.Fatalf("dial with insecureIgnoreHostKey: %v", err)
	}
}

// A dial whose caller gives up returns at once, whatever stage it is in.
func TestCancelledDialReturns(t *testing.T) {
	mute, _ := net.Listen("tcp", "127.0.0.1:0")
	defer mute.Close()
	go func() {
		for {
			if _, err := mute.Accept(); err != nil {
				return
			}
		}
	}()
	f := newSSHFixture(t)
	cfg := f.config()
	cfg.Hosts[0].Address, cfg.Budgets.Dial = mute.Addr().String(), Duration(time.Minute)
	p := f.provider(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.hosts["h1"].get(ctx)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("cancelled dial = %v after %s", err, time.Since(start))
	}
}

// Every goroutine the transport starts (calls, reapers, keepalives, watchers) ends with its
// link: after the provider is closed and the host is gone, none is left.
func TestNoGoroutineOutlivesItsLink(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("work", func(t *testing.T) {
		f := newSSHFixture(t)
		cfg := f.config()
		cfg.Budgets.Keepalive = Duration(20 * time.Millisecond)
		cfg.Budgets.RPC = Duration(200 * time.Millisecond)
		p := f.provider(t, cfg)
		c, err := p.hosts["h1"].get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.LibVersion(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		c.Hostname(ctx) // unanswered: left to its reaper, which kills the link at its budget
		cancel()
		fresh, err := p.hosts["h1"].fresh(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		fresh.LibVersion(context.Background())
		fresh.Close()
		p.Check(context.Background())
		time.Sleep(300 * time.Millisecond)
		p.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
