package proxmox

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

const (
	testInstallation = "inst-1"
	testNode         = "pv1-1"
	// testPort is the proxies' port here; cmd/egressd's proxmox e2e uses another, so the two
	// test binaries may share this helper's loopback nets (127.0.101.x, 127.0.102.x).
	testPort = 18101
)

// addrSeq hands out this package's loopback addresses, 12 per simulator, so simulators of
// parallel tests never serve on one address. The 508 addresses of the two nets go round:
// one run of the package takes about 300, and a -count rerun finds the last one's closed.
var addrSeq atomic.Int64

func addresses(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		k := (addrSeq.Add(1) - 1) % (2 * 254)
		out[i] = netip.AddrFrom4([4]byte{127, 0, byte(101 + k/254), byte(1 + k%254)})
	}
	return out
}

// serveForwardProxy runs egressd's own forward proxy, the one a real VM's image runs.
func serveForwardProxy(ctx context.Context, ln net.Listener, p pvetest.Proxy) error {
	return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), AuthFile: p.AuthFile})
}

// newSim starts a simulator with opts (Addresses and Serve filled in when empty).
func newSim(t *testing.T, opts pvetest.Options) *pvetest.Server {
	t.Helper()
	if opts.Addresses == nil {
		opts.Addresses = addresses(12)
	}
	if opts.Serve == nil {
		opts.Serve = serveForwardProxy
	}
	sim, err := pvetest.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return sim
}

// simConfig is a provider config for sim, its token in a file of its own.
func simConfig(t *testing.T, sim *pvetest.Server) Config {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(sim.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{
		URL:          sim.URL(),
		TokenFile:    tok,
		Nodes:        []NodeConfig{{Name: testNode}},
		Templates:    map[string]TemplateConfig{"debian": {VMID: 9001}},
		MachineTypes: map[string]MachineType{"small": {Cores: 1, MemoryMiB: 512, DiskGiB: 4}},
	}
}

func newTestProvider(t *testing.T, cfg Config, log *slog.Logger) *Provider {
	t.Helper()
	p, err := New("pve", cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func testRequest(name, uid string) providers.CreateRequest {
	return providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation, Proxy: "crawl-1",
		Host: testNode, Port: testPort}
}

// settle waits until Get reports Running.
func settle(t *testing.T, p providers.Provider, id string) providers.Instance {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		inst, err := p.Get(context.Background(), id)
		if err == nil && inst.State == providers.StateRunning {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not Running: %v %v", id, inst.State, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
