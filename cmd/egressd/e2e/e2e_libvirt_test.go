package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// The libvirt end-to-end test: the real `egressd run` with a libvirt provider, against a real
// libvirtd reached over a real sshd on 127.0.0.1, booting real (TCG) VMs from a guest image
// built at test time (.ci/libvirt/build-guest.sh). The VM's user-data starts egressd's own
// forward proxy; the prober probes through it, a lease hands it out, curl uses it.
//
// It needs a host prepared by .ci/libvirt/setup.sh (root, libvirt, an isolated network, a
// pool, an sshd, all inside a network namespace of their own) and runs only when
// EGRESSD_LIBVIRT_E2E names setup's env file, and only inside that namespace (through
// .ci/libvirt/in-ns.sh); .ci/libvirt/run-e2e.sh does all of it. The namespace holds nothing
// but its loopback and the test's bridge, so every packet of the test stays in it: the
// servers it starts listen on the namespace's loopback or on the bridge.
const libvirtEnvVar = "EGRESSD_LIBVIRT_E2E"

// TestLibvirtEndToEnd drives `egressd run` with a libvirt provider through a proxy's life:
// create (with a kill -9 of egressd in the middle), Ready through the VM, lease, curl -x, a
// spec change that replaces the VM, and deletion that leaves no domain and no volume behind.
func TestLibvirtEndToEnd(t *testing.T) {
	envFile := os.Getenv(libvirtEnvVar)
	if envFile == "" {
		t.Skipf("SKIPPED: the libvirt end-to-end test needs a host prepared as root (a network "+
			"namespace with libvirtd, an isolated network, a pool, an sshd on its 127.0.0.1): run "+
			".ci/libvirt/run-e2e.sh, or .ci/libvirt/setup.sh and then .ci/libvirt/in-ns.sh env "+
			"GOPROXY=off %s=/var/tmp/egressd-libvirt-e2e/env go test -count=1 -run TestLibvirtEndToEnd "+
			"-v ./cmd/egressd/e2e", libvirtEnvVar)
	}
	needNats(t)
	for _, tool := range []string{"virsh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (.ci/libvirt/setup.sh installs it)", tool)
		}
	}
	e := loadLibvirtEnv(t, envFile)
	e.requireNetns(t)
	tm := &timings{t: t}
	testStart := time.Now()
	defer func() {
		tm.add("whole test: %s", secs(time.Since(testStart)))
		text := "egressd libvirt end-to-end test, " + time.Now().UTC().Format(time.RFC3339) + "\n"
		if t.Failed() {
			text += "RESULT: FAILED\n"
		} else {
			text += "RESULT: passed\n"
		}
		for _, l := range tm.lines {
			text += "  " + l + "\n"
		}
		if err := os.WriteFile(e.summary, []byte(text), 0o644); err != nil {
			t.Logf("writing the summary: %v", err)
		} else {
			t.Logf("summary written to %s", e.summary)
		}
	}()

	// The host as setup.sh left it: network active and isolated, pool active.
	if out := e.mustVirsh(t, "net-dumpxml", e.network); strings.Contains(out, "<forward") {
		t.Fatalf("network %s forwards traffic; the test needs an isolated network", e.network)
	}
	if out := e.mustVirsh(t, "net-info", e.network); !netActive(out) {
		t.Fatalf("network %s is not active:\n%s", e.network, out)
	}
	if out := e.mustVirsh(t, "pool-info", e.pool); !strings.Contains(out, "running") {
		t.Fatalf("pool %s is not running:\n%s", e.pool, out)
	}
	if d := e.domains(t); len(d) > 0 {
		t.Logf("removing domains an earlier run left: %v", d)
	}
	e.purge(t)
	t.Cleanup(func() {
		if t.Failed() {
			libvirtDiagnostics(t, e)
		}
		e.purge(t)
	})

	// The guest image, built now from Debian packages and this tree's egressd.
	dir := t.TempDir()
	imagePath := e.image
	if imagePath == "" {
		start := time.Now()
		out := filepath.Join(dir, "guest")
		cmd := exec.Command("../../../.ci/libvirt/build-guest.sh", out)
		cmd.Env = append(os.Environ(), "CACHE="+filepath.Join(e.work, "cache"))
		if staticBinary(egressdBin) { // built with CGO_ENABLED=0 (run-e2e.sh): usable in the guest as is
			cmd.Env = append(cmd.Env, "EGRESSD_BIN="+egressdBin)
		}
		if e.guestKernel != "" {
			cmd.Env = append(cmd.Env, "GUEST_KERNEL="+e.guestKernel)
		}
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build-guest.sh: %v\n%s", err, b)
		}
		t.Logf("build-guest.sh:\n%s", b)
		imagePath = filepath.Join(out, "egressd-guest.qcow2")
		tm.add("guest image build (static egressd, kernel, initramfs, disk): %s", secs(time.Since(start)))
	}
	digest := fileSHA256(t, imagePath)

	// Served over HTTP on the namespace's loopback: the provisioner, in the namespace too,
	// fetches it.
	var imageGets atomic.Int32
	imageURL := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/egressd-guest.qcow2" {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodGet {
			imageGets.Add(1)
		}
		http.ServeFile(w, r, imagePath)
	})) + "/egressd-guest.qcow2"

	// The site the crawler reaches through the VM: on the bridge address, the only address
	// of the namespace a guest can reach. It tells who asked.
	var lastPeer atomic.Value
	webURL := serveOn(t, e.bridgeIP+":0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		lastPeer.Store(host)
		fmt.Fprintf(w, "hello from the host, %s", host)
	})) + "/"

	// A fresh key per run: the base image's digest changes with every build of egressd.
	imageKey := "tiny-" + digest[:12]
	const provider, zone = "lv", "ci"
	cfg := filepath.Join(dir, "egressd.yaml")
	writeFile(t, cfg, fmt.Sprintf(`providers:
  - name: %s
    type: libvirt
    libvirt:
      sshKeyFile: %s
      knownHostsFile: %s
      domainType: qemu
      diskSizeGb: 1
      installGuestAgent: false
      hosts:
        - name: %s
          address: %q
          user: %s
          socket: %s
          pool: %s
          network: %s
          maxConcurrentOps: 2
      images:
        %s:
          url: %q
          sha256: %s
          format: qcow2
          firmware: bios
      machineTypes:
        tiny: {vcpus: 1, memoryMiB: 256}
`, provider, e.sshKey, e.knownHosts, zone, e.sshAddress, e.sshUser, orDefaultStr(e.socket, "/var/run/libvirt/libvirt-sock"),
		e.pool, e.network, imageKey, imageURL, digest))
	requireProvider(t, cfg, "libvirt")

	// The prober's echo endpoint on the bridge address, so probes go through the VM and back.
	n := startNode(t, dir, "--config", cfg, "--echo-listen", e.bridgeIP+":0")

	// ---------------------------------------------------------------- vm-1: kill -9 mid-create
	// Cold cache: the first Create fetches the image and uploads it to the pool. egressd is
	// killed as soon as the upload is complete (the digest marker is written last) or the
	// overlay exists, which is before the domain is defined; the restarted egressd must
	// converge to exactly one domain and no stray volume.
	put1 := time.Now()
	n.nats("kv", "put", "proxies", "vm-1", libvirtSpec(provider, zone, imageKey, 3128))
	killedAt, state := waitForUpload(t, e, n, "vm-1", 6*time.Minute)
	n.kill9()
	tm.add("vm-1 (cold image cache): kv put -> egressd killed with -9 after %s, at: %s", secs(killedAt.Sub(put1)), state)
	t.Logf("after the kill: domains %v, volumes %v", e.domains(t), e.volumes(t))
	restart := time.Now()
	n.start()
	rows := n.waitRows("vm-1 Ready after the restart", 8*time.Minute, readyOrFail(t, "vm-1", nil))
	tm.add("vm-1: restart -> Ready %s (includes the op's redelivery after the kill); kv put -> Ready %s",
		secs(time.Since(restart)), secs(time.Since(put1)))
	vm1 := rows["vm-1"].Status.InstanceName
	if d := e.domains(t); !slices.Equal(d, []string{vm1}) {
		t.Fatalf("after kill -9 and restart: domains %v, want exactly [%s]", d, vm1)
	}
	checkVolumes(t, e, []string{vm1})
	if got := imageGets.Load(); got < 1 {
		t.Fatalf("the image server saw %d GETs", got)
	}
	t.Logf("image GETs so far: %d (the kill may cut one off)", imageGets.Load())

	// ---------------------------------------------------------------- vm-2: timed, warm cache
	console := watchConsoles(t)
	put2 := time.Now()
	n.nats("kv", "put", "proxies", "vm-2", libvirtSpec(provider, zone, imageKey, 3128))
	var firstRunning time.Time
	rows = n.waitRows("vm-2 Ready", 6*time.Minute, readyOrFail(t, "vm-2", func(r fleet.Row) bool {
		if r.Phase == events.PhaseRunning && firstRunning.IsZero() {
			firstRunning = time.Now()
		}
		return true
	}))
	readyAt := time.Now()
	vm2 := rows["vm-2"].Status.InstanceName
	tm.add("vm-2 (warm image cache): kv put -> Ready %s", secs(readyAt.Sub(put2)))
	// The breakdown, from the host's side (QEMU's log, the serial console as it is written)
	// and the guest's (its kernel uptime at each step of its boot).
	times, raw, err := e.guestBootTimes(vm2)
	if err != nil {
		t.Errorf("reading the guest's boot timeline through the agent: %v", err)
	} else {
		t.Logf("vm-2 boot timeline (kernel uptime, s):\n%s", raw)
		if _, ok := times["proxy-listening"]; !ok {
			t.Errorf("the user-data script did not run to the end in the guest:\n%s", raw)
		}
		tm.add("vm-2 guest's own boot (kernel uptime): init %.1fs, DHCP lease %.1fs, user-data started %.1fs, forward proxy listening %.1fs",
			times["init"], times["bound"], times["user-data"], times["proxy-listening"])
	}
	var parts []string
	qs, qerr := qemuStarted(vm2)
	if qerr == nil {
		parts = append(parts, "QEMU started +"+secs(qs.Sub(put2)))
	}
	if seen, ok := console.firstSeen(vm2, "init"); ok && err == nil {
		kernel := seen.Add(-time.Duration(times["init"] * float64(time.Second)))
		parts = append(parts, "guest kernel started +"+secs(kernel.Sub(put2))+" (from the serial console)")
		if qerr == nil {
			parts = append(parts, "i.e. firmware and SYSLINUX loading "+secs(kernel.Sub(qs)))
		}
		if l, ok := times["proxy-listening"]; ok {
			parts = append(parts, "forward proxy listening +"+secs(kernel.Add(time.Duration(l*float64(time.Second))).Sub(put2)))
		}
	}
	if !firstRunning.IsZero() {
		parts = append(parts, "Running (address known) +"+secs(firstRunning.Sub(put2)))
	}
	parts = append(parts, "Ready +"+secs(readyAt.Sub(put2)))
	tm.add("vm-2 from kv put: %s", strings.Join(parts, ", "))
	if d := e.domains(t); !slices.Equal(d, sorted(vm1, vm2)) {
		t.Fatalf("domains %v, want [%s %s]", d, vm1, vm2)
	}

	// ---------------------------------------------------------------- lease and curl -x
	addr2 := rows["vm-2"].Address
	r, raw := n.acquire(`{"selector":{"e2e":"libvirt"},"ttlSeconds":120,"holder":"e2e-libvirt"}`)
	if r.Lease.ID == "" || r.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	leased := rows[r.Lease.Proxy].Address
	if !strings.Contains(r.Lease.URL, leased) || leased == "" {
		t.Fatalf("lease URL %s is not the address of %s (%s)", r.Lease.URL, r.Lease.Proxy, leased)
	}
	if !strings.Contains(r.Lease.URL, url.QueryEscape(libvirtUser)+":") {
		t.Fatalf("lease URL %s carries no credential", r.Lease.URL)
	}
	vmIP, _, _ := net.SplitHostPort(leased)
	for _, connect := range []bool{false, true} {
		body := curlBody(t, r.Lease.URL, webURL, connect)
		if want := "hello from the host, " + vmIP; body != want {
			t.Fatalf("curl -x %s (CONNECT %v) %s: %q, want %q", r.Lease.URL, connect, webURL, body, want)
		}
	}
	if peer, _ := lastPeer.Load().(string); peer != vmIP {
		t.Fatalf("the web server saw %s, not the VM %s", peer, vmIP)
	}
	if code := curlVia(t, "http://"+libvirtUser+":wrong@"+leased, webURL); code != "407" {
		t.Fatalf("the VM's proxy answered a wrong password with HTTP %s, want 407", code)
	}
	t.Logf("curl -x %s reached %s from the VM (%s), plain and CONNECT; a wrong password got 407", r.Lease.URL, webURL, vmIP)
	out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	if !strings.Contains(out, `"released":true`) {
		t.Fatalf("release: %s", out)
	}

	// ---------------------------------------------------------------- a spec change replaces
	uuidBefore := strings.TrimSpace(e.mustVirsh(t, "domuuid", vm2))
	put3 := time.Now()
	n.nats("kv", "put", "proxies", "vm-2", libvirtSpec(provider, zone, imageKey, 8080))
	// Rolled successor first (decision 98): done once the old domain is deleted.
	rows = n.waitRows("vm-2 replaced and Ready on port 8080", 8*time.Minute, readyOrFail(t, "vm-2", func(r fleet.Row) bool {
		return strings.HasSuffix(r.Address, ":8080") && r.Status.Rollout == nil
	}))
	tm.add("vm-2 replacement (port 3128 -> 8080): kv put -> Ready %s", secs(time.Since(put3)))
	newName := rows["vm-2"].Status.InstanceName
	uuidAfter := strings.TrimSpace(e.mustVirsh(t, "domuuid", newName))
	if uuidAfter == uuidBefore {
		t.Fatalf("vm-2 was not replaced: domain %s keeps UUID %s", newName, uuidAfter)
	}
	if d := e.domains(t); !slices.Equal(d, sorted(vm1, newName)) {
		t.Fatalf("after the replacement: domains %v, want [%s %s]", d, vm1, newName)
	}
	checkVolumes(t, e, []string{vm1, newName})
	ip3, _, _ := net.SplitHostPort(rows["vm-2"].Address)
	via := (&url.URL{Scheme: "http", User: url.UserPassword(libvirtUser, libvirtPassword), Host: rows["vm-2"].Address}).String()
	if body := curlBody(t, via, webURL, false); body != "hello from the host, "+ip3 {
		t.Fatalf("through the replacement: %q", body)
	}
	if addr2 != rows["vm-2"].Address {
		t.Logf("vm-2 moved from %s to %s (domain %s, UUID %s -> %s)", addr2, rows["vm-2"].Address, newName, uuidBefore, uuidAfter)
	}

	// ---------------------------------------------------------------- deletion leaves nothing
	del := time.Now()
	for _, name := range []string{"vm-1", "vm-2"} {
		n.nats("kv", "del", "-f", "proxies", name)
	}
	n.waitRows("both proxies gone", 5*time.Minute, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	var left []string
	waitUntil(t, "no domain and no instance volume left", 2*time.Minute, func() (bool, string) {
		left = nil
		for _, v := range e.volumes(t) {
			if !strings.HasPrefix(v, "base-") {
				left = append(left, v)
			}
		}
		d := e.domains(t)
		return len(d) == 0 && len(left) == 0, fmt.Sprintf("domains %v, volumes %v", d, left)
	})
	tm.add("deletion of both: kv del -> no domain, no volume %s", secs(time.Since(del)))
	t.Logf("volumes left in %s (the base image cache, kept by design): %v", e.pool, e.volumes(t))
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d after SIGTERM, want 0", code)
	}
}
