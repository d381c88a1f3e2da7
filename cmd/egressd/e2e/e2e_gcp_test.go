package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/gcp/gcptest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/readside/fleet"
)

// The gcp end-to-end test: the real `egressd run` with a gcp provider pointed at the Compute
// API simulator, which runs in this test process and serves the real SDK client's REST calls
// (authenticated: the provider reads a service-account key file and exchanges it for a token
// at the simulator). Each RUNNING "VM" is egressd's own forward proxy on 127.0.103.x (this
// test's loopback net), started from the instance's egressd-proxy metadata item as the
// guide's image does, dialling out from its own address.
const (
	gcpProject = "egressd-e2e"
	gcpZone    = "us-central1-a"
	gcpUser    = "crawler"
	gcpPass    = "gce-p4ss:w@rd"
	gcpKeyID   = "sentinel-e2e-key-id-7c41"
	gcpToken   = "ya29.sentinel-e2e-token-5b90"
)

type gcpWorld struct {
	sim     *gcptest.Server
	cfg     string
	secrets []string // of the credential: its key ID, a line of its key, the token
}

func newGCPWorld(t *testing.T, dir string) *gcpWorld {
	t.Helper()
	addrs := make([]netip.Addr, 20)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{127, 0, 103, byte(i + 2)})
	}
	serve := func(ctx context.Context, ln net.Listener, authFile string) error {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), Source: host, AuthFile: authFile})
	}
	sim, err := gcptest.New(gcptest.Options{Project: gcpProject, Zones: []string{gcpZone}, Addresses: addrs,
		Boot: gcptest.EgressdImage(dir, serve),
		// Every step visible to the reconciler's polls, none slow.
		Delays: gcptest.Delays{Pending: 200 * time.Millisecond, Provisioning: time.Second, Staging: 500 * time.Millisecond, Stopping: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	key, auth, err := gcptest.ServiceAccount(sim.URL(), gcpProject, gcpKeyID, gcpToken)
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(key, &parsed); err != nil {
		t.Fatal(err)
	}
	sim.SetAuth(auth)
	keyFile := filepath.Join(dir, "gcp-key.json")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "egressd.yaml")
	writeFile(t, cfg, fmt.Sprintf(`providers:
  - name: gce
    type: gcp
    gcp:
      project: %s
      zones:
        - name: %s
          maxConcurrentOps: 4
      machineTypes:
        small: {type: e2-small, vcpus: 2, memoryMiB: 2048}
      images:
        debian: projects/debian-cloud/global/images/family/debian-12
      firewall:
        sourceRanges: [127.0.0.0/8]
      endpoint: %s
      credentialsFile: %s
`, gcpProject, gcpZone, sim.URL(), keyFile))
	return &gcpWorld{sim: sim, cfg: cfg, secrets: []string{gcpKeyID, gcpToken, strings.Split(parsed.PrivateKey, "\n")[1]}}
}

func gcpSpec(port int) string {
	return fmt.Sprintf(`{"provider":"gce","placement":{"zone":%q,"machineType":"small","image":"debian"},"port":%d,`+
		`"attributes":{"e2e":"gcp"},"auth":{"username":%q,"password":%q},`+
		`"healthCheck":{"intervalSeconds":2,"timeoutSeconds":2,"failureThreshold":2,"successThreshold":1}}`, gcpZone, port, gcpUser, gcpPass)
}

// TestGCPEndToEnd: kv put → insert → RUNNING → probed through the VM's proxy → Ready →
// leased → curl -x works; a stockout is a visible reason and a wait, not an insert loop; kv
// del deletes the instance and its firewall rule; and a kill -9 of egressd between the insert
// and RUNNING still ends with exactly one instance.
func TestGCPEndToEnd(t *testing.T) {
	needNats(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (.ci/run installs it)")
	}
	dir := t.TempDir()
	w := newGCPWorld(t, dir)
	requireProvider(t, w.cfg, "gcp")
	n := startNode(t, dir, "--config", w.cfg)
	webURL := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		peer, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(rw, "hello, %s", peer)
	})) + "/"

	// ---------------------------------------------------------------- g1: up, leased, used
	n.nats("kv", "put", "proxies", "g1", gcpSpec(3128))
	rows := n.waitRows("g1 Ready", 60*time.Second, readyOrFail(t, "g1", nil))
	if got := w.sim.Inserted(); got != 1 {
		t.Fatalf("%d instances inserted for one proxy, want 1", got)
	}
	g1 := rows["g1"].Status.InstanceName
	if st := w.sim.Statuses(gcpZone); st[g1] != gcptest.StatusRunning || len(st) != 1 {
		t.Fatalf("simulator instances %v, want %s RUNNING", st, g1)
	}
	rules := w.sim.Firewalls()
	if len(rules) != 1 {
		t.Fatalf("firewall rules %v, want the one for port 3128", rules)
	}
	r, raw := n.acquire(`{"selector":{"e2e":"gcp"},"ttlSeconds":60,"holder":"e2e-gcp"}`)
	if r.Lease.ID == "" || !strings.Contains(r.Lease.URL, "@"+rows["g1"].Address) {
		t.Fatalf("acquire: %s", raw)
	}
	vmIP, _, _ := net.SplitHostPort(rows["g1"].Address)
	if !strings.HasPrefix(vmIP, "127.0.103.") {
		t.Fatalf("g1 at %s, not a simulated VM's address", rows["g1"].Address)
	}
	for _, connect := range []bool{false, true} {
		if body := curlBody(t, r.Lease.URL, webURL, connect); body != "hello, "+vmIP {
			t.Fatalf("curl -x %s (CONNECT %v): %q, want the site to see the VM %s", r.Lease.URL, connect, body, vmIP)
		}
	}
	wrong := (&url.URL{Scheme: "http", User: url.UserPassword(gcpUser, "wrong"), Host: rows["g1"].Address}).String()
	if code := curlVia(t, wrong, webURL); code != "407" {
		t.Fatalf("the VM's proxy answered a wrong password with HTTP %s, want 407", code)
	}

	// ---------------------------------------------------------------- g2: a stockout
	before := w.sim.Inserted()
	w.sim.FailInserts(gcpZone, gcptest.FaultStockout)
	n.nats("kv", "put", "proxies", "g2", gcpSpec(3128))
	rows = n.waitRows("g2 Waiting on the stockout", 60*time.Second, func(rows map[string]fleet.Row) bool {
		failFast(t, rows, "g2")
		return rows["g2"].Phase == events.PhaseWaiting
	})
	if r := rows["g2"]; r.Reason != events.ReasonQuota || !strings.Contains(r.Message, "stockout") || !strings.Contains(r.Message, "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Fatalf("g2: %s %q, want Quota saying stockout", r.Reason, r.Message)
	}
	if table := n.egressd("status"); !strings.Contains(table, "Quota") {
		t.Errorf("egressd status does not show the reason:\n%s", table)
	}
	if ev := n.egressd("events", "-f=false", "--proxy", "g2", "--kind", "phase", "--since", "1h"); !strings.Contains(ev, "stockout") {
		t.Errorf("the phase events do not say stockout:\n%s", ev)
	}
	// The wait is a wait: several reconciler polls later, still the one insert.
	time.Sleep(5 * time.Second)
	if got := w.sim.Inserted() - before; got != 1 {
		t.Fatalf("%d inserts for g2 after its stockout, want 1 (then a 5-minute wait)", got)
	}
	if r := n.rows()["g2"]; r.Phase != events.PhaseWaiting {
		t.Fatalf("g2 left Waiting: %s %s", r.Phase, r.Message)
	}

	// ---------------------------------------------------------------- kv del: gone, rule too
	n.nats("kv", "del", "-f", "proxies", "g2")
	n.nats("kv", "del", "-f", "proxies", "g1")
	n.waitRows("g1 and g2 gone", 60*time.Second, func(rows map[string]fleet.Row) bool { return len(rows) == 0 })
	waitUntil(t, "no instance and no firewall rule left", 30*time.Second, func() (bool, string) {
		st, fw := w.sim.Statuses(gcpZone), w.sim.Firewalls()
		return len(st) == 0 && len(fw) == 0, fmt.Sprintf("instances %v, rules %v", st, fw)
	})

	// ---------------------------------------------------------------- g3: kill -9 mid-insert
	w.sim.SetDelays(gcptest.Delays{Pending: 500 * time.Millisecond, Provisioning: 6 * time.Second, Staging: time.Second, Stopping: 500 * time.Millisecond})
	before = w.sim.Inserted()
	n.nats("kv", "put", "proxies", "g3", gcpSpec(3128))
	var g3 string
	waitUntil(t, "g3 inserted and PROVISIONING", 30*time.Second, func() (bool, string) {
		st := w.sim.Statuses(gcpZone)
		for name, s := range st {
			if s == gcptest.StatusProvisioning {
				g3 = name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", st)
	})
	n.kill9()
	t.Logf("egressd killed with -9 while %s is %s", g3, w.sim.Statuses(gcpZone)[g3])
	n.start()
	rows = n.waitRows("g3 Ready after the restart", 90*time.Second, readyOrFail(t, "g3", nil))
	if rows["g3"].Status.InstanceName != g3 {
		t.Fatalf("g3 is instance %s, want %s", rows["g3"].Status.InstanceName, g3)
	}
	if st := w.sim.Statuses(gcpZone); len(st) != 1 || st[g3] != gcptest.StatusRunning {
		t.Fatalf("after kill -9 and restart: instances %v, want exactly %s RUNNING", st, g3)
	}
	if got := w.sim.Inserted() - before; got != 1 {
		t.Fatalf("%d instances inserted for g3 across the kill, want 1", got)
	}
	n.nats("kv", "del", "-f", "proxies", "g3")
	waitUntil(t, "g3's instance and rule gone", 60*time.Second, func() (bool, string) {
		st, fw := w.sim.Statuses(gcpZone), w.sim.Firewalls()
		return len(st) == 0 && len(fw) == 0, fmt.Sprintf("instances %v, rules %v", st, fw)
	})
	// The credential the provider read on every call reached no log line (at debug level),
	// no status and no event.
	if w.sim.TokensIssued() == 0 {
		t.Fatal("the simulator issued no token: egressd did not use the key file")
	}
	seen := n.egressd("status", "-o", "json") + n.egressd("events", "-f=false", "--since", "1h", "--json")
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d after SIGTERM, want 0", code)
	}
	seen += n.logs()
	for _, s := range w.secrets {
		if strings.Contains(seen, s) {
			t.Errorf("the credential (%.12s...) leaked into egressd's log, status or events", s)
		}
	}
}
