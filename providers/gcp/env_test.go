package gcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/gcp/gcptest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

const (
	testProject      = "egressd-test"
	testInstallation = "inst-test"
	zoneA            = "us-central1-a"
	zoneB            = "europe-west6-b"
	// sentinelKeyID and sentinelToken are the credential's secrets as a test can spot them:
	// the key file's private_key_id and the access token the simulator issues for it.
	sentinelKeyID = "sentinel-credential-key-5f3a9c"
	sentinelToken = "ya29.sentinel-access-token-8d21e7"
)

// testDelays keep every asynchronous step visible yet short.
var testDelays = gcptest.Delays{Pending: 10 * time.Millisecond, Provisioning: 20 * time.Millisecond,
	Staging: 20 * time.Millisecond, Stopping: 10 * time.Millisecond}

// Every simulator gets its own proxy port, so that simulators side by side may reuse the
// addresses of 127.0.100.x, this package's loopback net.
var nextPort atomic.Int32

func init() { nextPort.Store(21000) }

func pool(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, 0, 100, byte(i + 1)})
	}
	return out
}

// serveProxy is egressd's own forward proxy, the one the guide's image runs; it dials out
// from the VM's own address, as a VM does.
func serveProxy(ctx context.Context, ln net.Listener, authFile string) error {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), Source: host, AuthFile: authFile})
}

// world is one simulator with a service-account key file it accepts.
type world struct {
	sim       *gcptest.Server
	port      int // the port requests ask for
	credsFile string
	dir       string
}

func newWorld(t *testing.T, opts gcptest.Options) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{port: int(nextPort.Add(1)), dir: dir, credsFile: filepath.Join(dir, "key.json")}
	opts.Project = testProject
	if len(opts.Zones) == 0 {
		opts.Zones = []string{zoneA, zoneB}
	}
	if opts.Addresses == nil {
		opts.Addresses = pool(16)
	}
	if opts.Delays == (gcptest.Delays{}) {
		opts.Delays = testDelays
	}
	opts.Boot = gcptest.EgressdImage(dir, serveProxy)
	sim, err := gcptest.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	w.sim = sim
	w.rotate(t, sentinelKeyID, sentinelToken)
	return w
}

// rotate writes a new key file and makes the simulator accept only it.
func (w *world) rotate(t *testing.T, keyID, token string) {
	t.Helper()
	file, auth, err := gcptest.ServiceAccount(w.sim.URL(), testProject, keyID, token)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.credsFile, file, 0o600); err != nil {
		t.Fatal(err)
	}
	w.sim.SetAuth(auth)
}

func (w *world) config() Config {
	return Config{
		Project:         testProject,
		Zones:           []ZoneConfig{{Name: zoneA}, {Name: zoneB, MaxConcurrentOps: 2}},
		MachineTypes:    map[string]MachineType{"small": {Type: "e2-small", VCPUs: 2, MemoryMiB: 2048}},
		Images:          map[string]string{"debian": "projects/debian-cloud/global/images/family/debian-12"},
		Firewall:        FirewallConfig{SourceRanges: []string{"127.0.0.0/8"}},
		Endpoint:        w.sim.URL(),
		CredentialsFile: w.credsFile,
	}
}

func (w *world) provider(t *testing.T, log *slog.Logger) *Provider {
	t.Helper()
	return w.providerWith(t, w.config(), log)
}

func (w *world) providerWith(t *testing.T, cfg Config, log *slog.Logger) *Provider {
	t.Helper()
	p, err := New("gce", cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (w *world) request(uid string) providers.CreateRequest {
	return providers.CreateRequest{Name: providers.InstanceName(testInstallation, uid), UID: uid, Installation: testInstallation,
		Proxy: "p-" + uid, Host: zoneA, Port: w.port, UserData: providers.UserData("#cloud-config\n")}
}

// settle waits until Get reports the instance Running.
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

func idFor(zone string, req providers.CreateRequest) string {
	return fmt.Sprintf("zones/%s/instances/%s", zone, req.Name)
}

func gcptestOptions() gcptest.Options { return gcptest.Options{} }

func sleep(ms int) { time.Sleep(time.Duration(ms) * time.Millisecond) }
