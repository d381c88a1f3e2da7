package pvetest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// F14: a paused VM is status running, qmpstatus paused in status/current and plain running
// in cluster/resources; its agent times out and its proxy stops; Resume brings both back.
func TestPausedVM(t *testing.T) {
	e := newEnv(t, nil)
	const id = 100600
	ip := e.booted(t, id, "proxy-paused", "")
	addr := netip.AddrPortFrom(ip, proxyPort)
	if refused(addr) {
		t.Fatal("no proxy before the pause")
	}
	if err := e.sim.Pause(id); err != nil {
		t.Fatal(err)
	}
	var cur map[string]any
	e.c.data("GET", vmPath(id)+"/status/current", nil, &cur)
	if cur["status"] != "running" || cur["qmpstatus"] != "paused" {
		t.Errorf("status/current %v, want running/paused (F14)", cur)
	}
	if got := resourceStatus(t, e, id); got != "running" {
		t.Errorf("cluster/resources status %q, want running (F14)", got)
	}
	e.c.do("GET", vmPath(id)+"/agent/network-get-interfaces", nil).
		wantError(t, 500, "VM 100600 qmp command 'guest-ping' failed - got timeout")
	if !refused(addr) {
		t.Error("a paused VM's proxy still answers")
	}
	if err := e.sim.Pause(id); err == nil {
		t.Error("pausing twice succeeded")
	}
	if err := e.sim.Resume(id); err != nil {
		t.Fatal(err)
	}
	if got := e.c.agentAddr(id); got != ip {
		t.Errorf("address after resume %s, want %s", got, ip)
	}
	if refused(addr) {
		t.Error("no proxy after resume")
	}
	// A paused VM is running for destroy and stop.
	if err := e.sim.Pause(id); err != nil {
		t.Fatal(err)
	}
	e.c.do("DELETE", vmPath(id), nil).wantError(t, 500, "VM 100600 is running - destroy failed")
	e.c.ok("POST", vmPath(id)+"/status/stop", nil)
	e.c.data("GET", vmPath(id)+"/status/current", nil, &cur)
	if cur["status"] != "stopped" || cur["qmpstatus"] != "stopped" {
		t.Errorf("after stop %v (F14)", cur)
	}
}

func resourceStatus(t *testing.T, e *env, vmid int) string {
	t.Helper()
	s, _ := resourceEntry(t, e, vmid)["status"].(string)
	return s
}

// resourceEntry is vmid's cluster/resources entry, nil when absent.
func resourceEntry(t *testing.T, e *env, vmid int) map[string]any {
	t.Helper()
	var res []map[string]any
	e.c.data("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &res)
	for _, x := range res {
		if x["vmid"] == float64(vmid) {
			return x
		}
	}
	return nil
}

// F5: the agent's three errors, each in its state.
func TestAgentErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env, id int)
		msg   string
	}{
		{"stopped", func(t *testing.T, e *env, id int) { e.cloned(t, id, "proxy-agent") }, "VM 100700 is not running"},
		{"booting", func(t *testing.T, e *env, id int) {
			e.cloned(t, id, "proxy-agent")
			e.c.ok("POST", vmPath(id)+"/status/start", nil)
		}, "QEMU guest agent is not running"},
		{"agent removed", func(t *testing.T, e *env, id int) {
			e.cloned(t, id, "proxy-agent")
			e.c.data("PUT", vmPath(id)+"/config", url.Values{"delete": {"agent"}}, nil)
			e.c.ok("POST", vmPath(id)+"/status/start", nil)
		}, "No QEMU guest agent configured"},
		{"agent disabled", func(t *testing.T, e *env, id int) {
			e.cloned(t, id, "proxy-agent")
			e.c.data("PUT", vmPath(id)+"/config", url.Values{"agent": {"enabled=0"}}, nil)
			e.c.ok("POST", vmPath(id)+"/status/start", nil)
		}, "No QEMU guest agent configured"},
		{"injected", func(t *testing.T, e *env, id int) {
			e.cloned(t, id, "proxy-agent")
			e.c.ok("POST", vmPath(id)+"/status/start", nil)
			e.sim.FailNext(OpAgent, node, Fault{Kind: FaultHTTP, Status: 500, Message: "VM 100700 qmp command 'guest-network-get-interfaces' failed - got timeout"})
		}, "VM 100700 qmp command 'guest-network-get-interfaces' failed - got timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			boot := time.Hour // the agent never comes up during the test
			if tt.name == "injected" {
				boot = time.Millisecond
			}
			e := newEnv(t, func(o *Options) { o.Timing.Boot = boot })
			tt.setup(t, e, 100700)
			if tt.name == "injected" {
				waitBooted(t, e, 100700)
			}
			e.c.do("GET", vmPath(100700)+"/agent/network-get-interfaces", nil).wantError(t, 500, tt.msg)
		})
	}
}

func waitBooted(t *testing.T, e *env, id int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if v, _ := e.sim.VM(id); v.Booted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("never booted")
		}
	}
}

// F21: the agent's interfaces: lo with loopback addresses, eth0 with the net0 MAC, the pool
// address and a link-local IPv6.
func TestAgentShape(t *testing.T) {
	e := newEnv(t, nil)
	const id = 100750
	ip := e.booted(t, id, "proxy-shape", "")
	var out struct {
		Result []agentIface `json:"result"`
	}
	e.c.data("GET", vmPath(id)+"/agent/network-get-interfaces", nil, &out)
	v, _ := e.sim.VM(id)
	n, _ := parseNet(v.Config["net0"])
	if len(out.Result) != 2 || out.Result[0].Name != "lo" || out.Result[1].Name != "eth0" {
		t.Fatalf("interfaces %+v", out.Result)
	}
	eth := out.Result[1]
	if eth.HW != lower(n.MAC) || len(eth.Address) != 2 || eth.Address[0].IP != ip.String() ||
		eth.Address[0].Type != "ipv4" || eth.Address[1].Type != "ipv6" || !netip.MustParseAddr(eth.Address[1].IP).IsLinkLocalUnicast() {
		t.Errorf("eth0 %+v (MAC %s)", eth, n.MAC)
	}
	if v.Address != ip || !v.Proxy {
		t.Errorf("VM %+v", v)
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// Start and stop tasks: failures in the task (qemu-server's vm_start texts), stop of a stopped
// VM OK, faults.
func TestPowerTasks(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env) int // answers the VMID to start
		path  string
		exit  string
	}{
		{"start a template", func(*testing.T, *env) int { return tmplID }, "start", "you can't start a vm if it's a template"},
		{"start a running VM", func(t *testing.T, e *env) int {
			e.cloned(t, 100800, "proxy-p")
			e.c.ok("POST", vmPath(100800)+"/status/start", nil)
			return 100800
		}, "start", "VM 100800 already running"},
		{"start with a missing seed ISO", func(t *testing.T, e *env) int {
			e.cloned(t, 100800, "proxy-p")
			e.c.data("PUT", vmPath(100800)+"/config", url.Values{"ide2": {"local:iso/gone.iso,media=cdrom"}}, nil)
			return 100800
		}, "start", "volume 'local:iso/gone.iso' does not exist"},
		{"stop a stopped VM", func(t *testing.T, e *env) int { e.cloned(t, 100800, "proxy-p"); return 100800 }, "stop", ExitOK},
		{"start lock timeout", func(t *testing.T, e *env) int {
			e.cloned(t, 100800, "proxy-p")
			e.sim.FailNext(OpStart, node, Fault{Kind: FaultLockTimeout})
			return 100800
		}, "start", "can't lock file '/var/lock/qemu-server/lock-100800.conf' - got timeout"},
		{"start pool empty", func(t *testing.T, e *env) int {
			for i := range 4 {
				e.booted(t, 100810+i, "proxy-full", "")
			}
			e.cloned(t, 100800, "proxy-p")
			return 100800
		}, "start", "start failed: pvetest: the address pool is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			id := tt.setup(t, e)
			if exit := e.c.wait(e.c.upid("POST", vmPath(id)+"/status/"+tt.path, nil)); exit != tt.exit {
				t.Fatalf("exit %q, want %q", exit, tt.exit)
			}
		})
	}
}

// Without a seed, or with a seed the image cannot use, the VM boots and its agent answers,
// but nothing listens; VM.ProxyErr says why.
func TestNoProxyWithoutUsableSeed(t *testing.T) {
	tests := []struct {
		name string
		iso  func(t *testing.T) []byte // nil: attach nothing
		want string
	}{
		{"no seed", nil, "no NoCloud seed (cidata) attached"},
		{"not an ISO", func(*testing.T) []byte { return []byte("not an image at all, just bytes") }, "seed is not an ISO 9660 image"},
		{"wrong label", func(t *testing.T) []byte {
			return buildSeed(t, seedFiles{label: "config-2", name: "x", port: proxyPort})
		}, `seed label "config-2" is not cidata`},
		{"no egressd.json", func(t *testing.T) []byte { return buildSeed(t, seedFiles{name: "x", skip: true}) }, "seed has no egressd.json"},
		{"bad port", func(t *testing.T) []byte { return buildSeed(t, seedFiles{name: "x", port: 70000}) }, "egressd.json port 70000 is not a port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			const id = 100900
			e.cloned(t, id, "proxy-noseed")
			if tt.iso != nil {
				e.c.wait(e.c.upload(node, "local", "s.iso", tt.iso(t)))
				e.c.data("PUT", vmPath(id)+"/config", url.Values{"ide2": {"local:iso/s.iso,media=cdrom"}}, nil)
			}
			e.c.ok("POST", vmPath(id)+"/status/start", nil)
			ip := e.c.agentAddr(id)
			v, _ := e.sim.VM(id)
			if v.Proxy || v.ProxyErr != tt.want {
				t.Errorf("proxy %v, ProxyErr %q, want %q", v.Proxy, v.ProxyErr, tt.want)
			}
			if !refused(netip.AddrPortFrom(ip, proxyPort)) {
				t.Error("something listens")
			}
		})
	}
}

// PowerOff: the guest stops behind the API's back; its address returns to the pool.
func TestPowerOff(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Addresses = pool(1) })
	ip := e.booted(t, 101000, "proxy-off", "")
	if err := e.sim.PowerOff(101000); err != nil {
		t.Fatal(err)
	}
	if got := resourceStatus(t, e, 101000); got != "stopped" {
		t.Errorf("status %q", got)
	}
	if !refused(netip.AddrPortFrom(ip, proxyPort)) {
		t.Error("proxy still listens")
	}
	if err := e.sim.PowerOff(101000); err == nil {
		t.Error("powering off a stopped VM succeeded")
	}
	e.c.ok("POST", vmPath(101000)+"/status/start", nil) // the one address is free again
	if got := e.c.agentAddr(101000); got != ip {
		t.Errorf("address %s, want %s again", got, ip)
	}
}

// The seed's credential never reaches the simulator's log, VM.ProxyErr or the proxy's
// arguments other than its auth file (sentinel).
func TestSeedCredentialStaysPrivate(t *testing.T) {
	const sentinel = "SENTINEL-7f3a9c"
	var logs bytes.Buffer
	var seen []Proxy
	var mu sync.Mutex
	e := newEnv(t, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		serve := o.Serve
		o.Serve = func(ctx context.Context, ln net.Listener, p Proxy) error {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
			return serve(ctx, ln, p)
		}
	})
	// One VM whose seed is unusable (bad port) and one that serves, both carrying the sentinel.
	e.cloned(t, 101800, "proxy-bad")
	e.c.wait(e.c.upload(node, "local", "bad.iso", buildSeed(t, seedFiles{name: "bad", port: 0, auth: "u:lease:" + sentinel})))
	e.c.data("PUT", vmPath(101800)+"/config", url.Values{"ide2": {"local:iso/bad.iso,media=cdrom"}}, nil)
	e.c.ok("POST", vmPath(101800)+"/status/start", nil)
	e.c.agentAddr(101800)
	e.booted(t, 101801, "proxy-good", "u:lease:"+sentinel)
	for _, v := range e.sim.VMs() {
		if strings.Contains(v.ProxyErr, sentinel) {
			t.Errorf("ProxyErr %q holds the credential", v.ProxyErr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].AuthFile == "" || strings.Contains(fmt.Sprint(seen[0]), sentinel) {
		t.Errorf("Serve saw %+v", seen)
	}
	b, err := os.ReadFile(seen[0].AuthFile)
	if err != nil || string(b) != "u:lease:"+sentinel+"\n" {
		t.Errorf("auth file %q, %v", b, err)
	}
	if info, err := os.Stat(seen[0].AuthFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("auth file mode %v, %v", info.Mode(), err)
	}
	e.sim.Close()
	if strings.Contains(logs.String(), sentinel) {
		t.Errorf("log holds the credential:\n%s", logs.String())
	}
	if logs.Len() == 0 {
		t.Error("nothing logged: the test proves nothing")
	}
}
