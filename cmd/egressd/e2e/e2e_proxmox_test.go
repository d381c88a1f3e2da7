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
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
	"github.com/egressd/egressd/readside/fleet"
)

// The proxmox end-to-end test's VMs serve on 127.0.102.200–250 (this test's loopback net,
// shared with providers/proxmox's tests, which use another port) at port proxmoxPort.
const (
	proxmoxPort     = 18102
	proxmoxNode     = "pv1-1"
	proxmoxUser     = "crawler"
	proxmoxPassword = "e2e-pve:p4ss"
	proxmoxClone    = "POST /nodes/{node}/qemu/{vmid}/clone"
)

func proxmoxSpec(port int) string {
	b, _ := json.Marshal(map[string]any{
		"provider":   "pve",
		"placement":  map[string]string{"zone": proxmoxNode, "machineType": "small", "image": "debian"},
		"port":       port,
		"attributes": map[string]string{"e2e": "proxmox"},
		"auth":       map[string]string{"username": proxmoxUser, "password": proxmoxPassword},
		"healthCheck": map[string]int{
			"intervalSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3, "successThreshold": 1,
		},
	})
	return string(b)
}

// guestVMs are the simulator's VMs that are not templates.
func guestVMs(sim *pvetest.Server) []pvetest.VM {
	var out []pvetest.VM
	for _, v := range sim.VMs() {
		if !v.Template {
			out = append(out, v)
		}
	}
	return out
}

func seedVolumes(sim *pvetest.Server) []string {
	var out []string
	for _, v := range sim.Volumes(proxmoxNode, "local") {
		if strings.HasSuffix(v, "-seed.iso") {
			out = append(out, v)
		}
	}
	return out
}

// proxmoxSim starts the PVE API simulator in this process, its VMs real forward proxies on
// 127.0.<net>.<from>–<to>, and writes dir/egressd.yaml with a proxmox provider "pve" on it.
func proxmoxSim(t *testing.T, dir string, net4, from, to byte, timing pvetest.Timing) (*pvetest.Server, string) {
	t.Helper()
	var addrs []netip.Addr
	for i := int(from); i <= int(to); i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{127, 0, net4, byte(i)}))
	}
	sim, err := pvetest.New(pvetest.Options{
		Addresses: addrs,
		// Traffic leaves from the VM's own address, as from a real VM.
		Serve: func(ctx context.Context, ln net.Listener, p pvetest.Proxy) error {
			return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), Source: p.Addr.Addr().String(), AuthFile: p.AuthFile})
		},
		Timing: timing,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	tokenFile := filepath.Join(dir, "pve-token")
	writeFile(t, tokenFile, sim.Token()+"\n")
	cfg := filepath.Join(dir, "egressd.yaml")
	writeFile(t, cfg, fmt.Sprintf(`providers:
  - name: pve
    type: proxmox
    proxmox:
      url: %s
      tokenFile: %s
      nodes:
        - {name: %s, maxConcurrentOps: 2}
      templates:
        debian: {vmid: 9001}
      machineTypes:
        small: {cores: 1, memoryMiB: 512}
      installGuestAgent: false
`, sim.URL(), tokenFile, proxmoxNode))
	return sim, cfg
}

// TestProxmoxEndToEnd drives `egressd run` with a proxmox provider against the PVE API
// simulator in this process, each started VM a real forward proxy on its own loopback
// address: kv put → clone (egressd killed with -9 while PVE clones) → restart → one VM, adopted →
// start → agent address → probed → Ready → leased → curl -x; a port change replaces the VM; a
// paused VM is replaced; kv del leaves no VM and no seed ISO; the token's secret is in no log
// line and no status.
func TestProxmoxEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	// A clone long enough to kill egressd in the middle of it (F16 measured ~2 s).
	sim, cfg := proxmoxSim(t, dir, 102, 200, 250, pvetest.Timing{Clone: 3 * time.Second, Boot: 500 * time.Millisecond})

	var lastPeer atomic.Value
	webURL := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		lastPeer.Store(host)
		fmt.Fprintf(w, "hello, %s", host)
	})) + "/"

	n := startNode(t, dir, "--config", cfg)

	// ------------------------------------------------ kill -9 while PVE clones, then restart
	put := time.Now()
	n.nats("kv", "put", "proxies", "pve-1", proxmoxSpec(proxmoxPort))
	waitUntil(t, "a clone in flight", time.Minute, func() (bool, string) {
		vms := guestVMs(sim)
		return len(vms) == 1 && vms[0].Lock == "clone", fmt.Sprintf("VMs %+v", vms)
	})
	n.kill9()
	t.Logf("egressd killed with -9 %s after kv put, mid-clone (VMs %+v)", time.Since(put).Round(time.Millisecond), guestVMs(sim))
	n.start()
	rows := n.waitRows("pve-1 Ready after the restart", 2*time.Minute, readyOrFail(t, "pve-1", nil))
	t.Logf("pve-1 Ready %s after kv put", time.Since(put).Round(time.Millisecond))
	vms := guestVMs(sim)
	if len(vms) != 1 || vms[0].Name != rows["pve-1"].Status.InstanceName || sim.Calls(proxmoxClone) != 1 {
		t.Fatalf("after kill -9 and restart: VMs %+v, %d clone calls; want one VM named %s, one clone",
			vms, sim.Calls(proxmoxClone), rows["pve-1"].Status.InstanceName)
	}
	firstVMID := vms[0].VMID
	if !strings.Contains(vms[0].Config["description"], "egressd-managed=true") {
		t.Errorf("the VM carries no marks: %q", vms[0].Config["description"])
	}

	// ------------------------------------------------ lease and curl -x
	r, raw := n.acquire(`{"selector":{"e2e":"proxmox"},"ttlSeconds":60,"holder":"e2e-proxmox"}`)
	if r.Lease.ID == "" || r.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	vmAddr := rows["pve-1"].Address
	if !strings.Contains(r.Lease.URL, vmAddr) || !strings.HasPrefix(vmAddr, vms[0].Address.String()+":") {
		t.Fatalf("lease URL %s, row address %s, VM address %s", r.Lease.URL, vmAddr, vms[0].Address)
	}
	vmIP := vms[0].Address.String()
	for _, connect := range []bool{false, true} {
		if body := curlBody(t, r.Lease.URL, webURL, connect); body != "hello, "+vmIP {
			t.Fatalf("curl -x %s (CONNECT %v): %q, want the answer to the VM %s", r.Lease.URL, connect, body, vmIP)
		}
	}
	if code := curlVia(t, "http://"+proxmoxUser+":wrong@"+vmAddr, webURL); code != "407" {
		t.Fatalf("a wrong password got HTTP %s, want 407", code)
	}
	out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	if !strings.Contains(out, `"released":true`) {
		t.Fatalf("release: %s", out)
	}

	// ------------------------------------------------ a port change replaces the VM
	n.nats("kv", "put", "proxies", "pve-1", proxmoxSpec(proxmoxPort+1))
	rows = n.waitRows("pve-1 replaced and Ready on the new port", 2*time.Minute, readyOrFail(t, "pve-1", func(r fleet.Row) bool {
		return strings.HasSuffix(r.Address, fmt.Sprintf(":%d", proxmoxPort+1)) && r.Status.Rollout == nil
	}))
	// Rolled successor first (decision 98): the new VM is a second clone under the
	// successor's name, beside the old one, which is destroyed once its leases are gone.
	waitUntil(t, "one VM, the new one", time.Minute, func() (bool, string) {
		vms = guestVMs(sim)
		return len(vms) == 1 && sim.Calls(proxmoxClone) == 2 &&
			strings.Contains(vms[0].Config["description"], fmt.Sprintf("egressd-port=%d\n", proxmoxPort+1)), fmt.Sprintf("VMs %+v", vms)
	})
	t.Logf("replaced: VMID %d before, %d after, %d clones", firstVMID, vms[0].VMID, sim.Calls(proxmoxClone))
	via := (&url.URL{Scheme: "http", User: url.UserPassword(proxmoxUser, proxmoxPassword), Host: rows["pve-1"].Address}).String()
	if body := curlBody(t, via, webURL, true); body != "hello, "+vms[0].Address.String() {
		t.Fatalf("through the replacement: %q", body)
	}
	if got := seedVolumes(sim); len(got) != 1 {
		t.Errorf("seed ISOs after the replacement: %v, want the new VM's only", got)
	}

	// ------------------------------------------------ a paused VM is Stopped, and replaced
	// F14: PVE lists a paused VM as running; the provider reads its QMP status and says
	// Stopped, and the reconciler replaces it.
	if err := sim.Pause(vms[0].VMID); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	waitUntil(t, "the paused VM replaced by a third clone", 2*time.Minute, func() (bool, string) {
		vms = guestVMs(sim)
		return sim.Calls(proxmoxClone) == 3 && len(vms) == 1 && !vms[0].Paused, fmt.Sprintf("%d clones, VMs %+v", sim.Calls(proxmoxClone), vms)
	})
	rows = n.waitRows("pve-1 Ready again after the pause", 2*time.Minute, readyOrFail(t, "pve-1", nil))
	t.Logf("paused VM replaced and Ready %s after the pause", time.Since(pausedAt).Round(time.Millisecond))
	vms = guestVMs(sim)
	if body := curlBody(t, (&url.URL{Scheme: "http", User: url.UserPassword(proxmoxUser, proxmoxPassword), Host: rows["pve-1"].Address}).String(), webURL, false); body != "hello, "+vms[0].Address.String() {
		t.Fatalf("through the VM that replaced the paused one: %q", body)
	}

	// ------------------------------------------------ kv del leaves no VM and no seed
	n.nats("kv", "del", "-f", "proxies", "pve-1")
	n.waitRows("pve-1 gone", time.Minute, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	waitUntil(t, "no VM and no seed ISO left", time.Minute, func() (bool, string) {
		vms, seeds := guestVMs(sim), seedVolumes(sim)
		return len(vms) == 0 && len(seeds) == 0, fmt.Sprintf("VMs %+v, seeds %v", vms, seeds)
	})
	secret := strings.SplitN(sim.Token(), "=", 2)[1]
	if strings.Contains(n.logs(), secret) || strings.Contains(n.egressd("status", "-o", "json"), secret) ||
		strings.Contains(n.egressd("status", "providers"), secret) ||
		strings.Contains(n.egressd("events", "-f=false", "--since", "1h", "--json"), secret) {
		t.Error("the API token's secret is in egressd's log, status or events")
	}
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d after SIGTERM, want 0", code)
	}
	_ = os.Remove(filepath.Join(dir, "pve-token"))
}
