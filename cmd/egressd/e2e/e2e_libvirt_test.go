package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// libvirtEnv is setup.sh's env file.
type libvirtEnv struct {
	file, netns                          string
	work, sshKey, knownHosts, sshAddress string
	sshUser, socket, uri                 string
	network, bridge, bridgeIP            string
	pool, poolDir                        string
	guestKernel, image, summary          string
}

func loadLibvirtEnv(t *testing.T, path string) libvirtEnv {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s=%s: %v (run .ci/libvirt/setup.sh first)", libvirtEnvVar, path, err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			kv[k] = v
		}
	}
	get := func(k string) string {
		if v := os.Getenv(k); v != "" { // the environment overrides the file
			return v
		}
		return kv[k]
	}
	e := libvirtEnv{
		file: path, netns: get("EGRESSD_LIBVIRT_NETNS"), work: get("EGRESSD_LIBVIRT_WORK"), sshKey: get("EGRESSD_LIBVIRT_SSH_KEY"),
		knownHosts: get("EGRESSD_LIBVIRT_KNOWN_HOSTS"), sshAddress: get("EGRESSD_LIBVIRT_SSH_ADDRESS"),
		sshUser: get("EGRESSD_LIBVIRT_SSH_USER"), socket: get("EGRESSD_LIBVIRT_SOCKET"), uri: get("EGRESSD_LIBVIRT_URI"),
		network: get("EGRESSD_LIBVIRT_NETWORK"), bridge: get("EGRESSD_LIBVIRT_BRIDGE"), bridgeIP: get("EGRESSD_LIBVIRT_BRIDGE_IP"),
		pool: get("EGRESSD_LIBVIRT_POOL"), poolDir: get("EGRESSD_LIBVIRT_POOL_DIR"),
		guestKernel: get("EGRESSD_LIBVIRT_GUEST_KERNEL"), image: get("EGRESSD_LIBVIRT_IMAGE"), summary: get("EGRESSD_LIBVIRT_SUMMARY"),
	}
	for k, v := range map[string]string{"EGRESSD_LIBVIRT_NETNS": e.netns, "EGRESSD_LIBVIRT_WORK": e.work, "EGRESSD_LIBVIRT_SSH_KEY": e.sshKey,
		"EGRESSD_LIBVIRT_KNOWN_HOSTS": e.knownHosts, "EGRESSD_LIBVIRT_SSH_ADDRESS": e.sshAddress,
		"EGRESSD_LIBVIRT_SSH_USER": e.sshUser, "EGRESSD_LIBVIRT_NETWORK": e.network,
		"EGRESSD_LIBVIRT_BRIDGE_IP": e.bridgeIP, "EGRESSD_LIBVIRT_POOL": e.pool, "EGRESSD_LIBVIRT_POOL_DIR": e.poolDir} {
		if v == "" {
			t.Fatalf("%s: %s is missing (rerun .ci/libvirt/setup.sh)", path, k)
		}
	}
	if e.uri == "" {
		e.uri = "qemu:///system"
	}
	if e.summary == "" {
		e.summary = filepath.Join(e.work, "e2e-summary.txt")
	}
	return e
}

// requireNetns fails unless this process runs in the network namespace setup.sh made: outside
// it, the sshd, the bridge and the libvirtd the env file names are not there (or, worse,
// somebody else's are).
func (e libvirtEnv) requireNetns(t *testing.T) {
	t.Helper()
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("reading this process's network namespace: %v", err)
	}
	ns, err := os.Stat(filepath.Join("/run/netns", e.netns))
	if err != nil {
		t.Fatalf("%s: EGRESSD_LIBVIRT_NETNS=%s: %v (rerun .ci/libvirt/setup.sh)", e.file, e.netns, err)
	}
	if !os.SameFile(self, ns) {
		t.Fatalf("the test runs outside network namespace %s: run it through .ci/libvirt/in-ns.sh", e.netns)
	}
}

// virsh runs virsh on the local libvirtd (the test inspects the host directly, independently
// of the provider's own view).
func (e libvirtEnv) virsh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-q", "-c", e.uri}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (e libvirtEnv) mustVirsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.virsh(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// domains lists every domain egressd's instances could be (names start with "egress-").
func (e libvirtEnv) domains(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, name := range strings.Fields(e.mustVirsh(t, "list", "--all", "--name")) {
		if strings.HasPrefix(name, "egress-") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// volumes lists the test pool's volumes, after a refresh so files libvirt has not noticed
// yet are seen too.
func (e libvirtEnv) volumes(t *testing.T) []string {
	t.Helper()
	e.mustVirsh(t, "pool-refresh", e.pool)
	var out []string
	for _, line := range strings.Split(e.mustVirsh(t, "vol-list", "--pool", e.pool), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	slices.Sort(out)
	return out
}

// purge removes every egress-* domain and every volume of the test pool (the pool is the
// test's own, made by setup.sh). It runs before the test, so a base image left by an earlier
// run under another digest cannot interfere, and after it.
func (e libvirtEnv) purge(t *testing.T) {
	for _, d := range e.domains(t) {
		_, _ = e.virsh("destroy", d)
		_, _ = e.virsh("undefine", d, "--nvram")
		_, _ = e.virsh("undefine", d)
	}
	for _, v := range e.volumes(t) {
		_, _ = e.virsh("vol-delete", "--pool", e.pool, v)
	}
}

// guestBootTimes reads the guest's boot timeline (kernel uptime in seconds at each step) that
// its init and the user-data script write to /run/egressd-guest/boot-times, through the
// guest agent.
func (e libvirtEnv) guestBootTimes(domain string) (map[string]float64, string, error) {
	agent := func(cmd string, args map[string]any) (json.RawMessage, error) {
		b, _ := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
		out, err := e.virsh("qemu-agent-command", domain, string(b), "--timeout", "10")
		if err != nil {
			return nil, err
		}
		var r struct {
			Return json.RawMessage `json:"return"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return nil, fmt.Errorf("%s: %q: %v", cmd, out, err)
		}
		return r.Return, nil
	}
	ret, err := agent("guest-file-open", map[string]any{"path": "/run/egressd-guest/boot-times"})
	if err != nil {
		return nil, "", err
	}
	var h int64
	if err := json.Unmarshal(ret, &h); err != nil {
		return nil, "", err
	}
	defer agent("guest-file-close", map[string]any{"handle": h})
	ret, err = agent("guest-file-read", map[string]any{"handle": h, "count": 65536})
	if err != nil {
		return nil, "", err
	}
	var rd struct {
		Buf string `json:"buf-b64"`
	}
	if err := json.Unmarshal(ret, &rd); err != nil {
		return nil, "", err
	}
	raw, err := base64.StdEncoding.DecodeString(rd.Buf)
	if err != nil {
		return nil, "", err
	}
	times := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				times[f[0]] = v
			}
		}
	}
	return times, strings.TrimSpace(string(raw)), nil
}

// qemuStarted is when libvirt last started the domain's QEMU, from its log on this host.
func qemuStarted(domain string) (time.Time, error) {
	f, err := os.Open(filepath.Join("/var/log/libvirt/qemu", domain+".log"))
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	var last time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ts, rest, ok := strings.Cut(sc.Text(), ": starting up ")
		if !ok || rest == "" {
			continue
		}
		if t, err := time.Parse("2006-01-02 15:04:05.000-0700", ts); err == nil {
			last = t
		}
	}
	if last.IsZero() {
		return last, fmt.Errorf("no start line in the QEMU log of %s", domain)
	}
	return last, nil
}

// guestUserData is the proxy's cloud-init user-data: a shell script, which the guest's init
// runs once the network is up. It starts egressd's own forward proxy, with the credential the
// provider put in the seed's egressd.json (a salted hash, never the password), and notes in the
// guest's boot timeline when the proxy listens.
func guestUserData(port int) string {
	return fmt.Sprintf(`#!/bin/sh
# egressd libvirt end-to-end test: run egressd's own forward proxy on port %[1]d.
set -e
auth=$(sed -n 's/.*"auth":"\([^"]*\)".*/\1/p' /cidata/egressd.json 2>/dev/null || true)
flags=
if [ -n "$auth" ]; then
  (umask 077; echo "$auth" > /run/forward-proxy.auth)
  flags="--auth-file /run/forward-proxy.auth"
fi
/usr/bin/egressd forward-proxy --listen 0.0.0.0:%[1]d --instance e2e $flags \
  --pid-file /run/forward-proxy.pid --log-file /var/log/forward-proxy.log &
i=0
while [ ! -s /run/forward-proxy.pid ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "proxy-listening $(cut -d' ' -f1 /proc/uptime)" >> /run/egressd-guest/boot-times
echo "forward proxy listening on port %[1]d${flags:+ with basic auth}"
`, port)
}

const (
	libvirtUser     = "crawler"
	libvirtPassword = "e2e-p4ss:w@rd"
)

func libvirtSpec(provider, zone, image string, port int) string {
	b, _ := json.Marshal(map[string]any{
		"provider":   provider,
		"placement":  map[string]string{"zone": zone, "machineType": "tiny", "image": image},
		"port":       port,
		"attributes": map[string]string{"e2e": "libvirt"},
		"auth":       map[string]string{"username": libvirtUser, "password": libvirtPassword},
		"cloudInit":  guestUserData(port),
		"healthCheck": map[string]int{
			"intervalSeconds": 3, "timeoutSeconds": 3, "failureThreshold": 3, "successThreshold": 1,
		},
	})
	return string(b)
}

// timings collects the figures the test reports, in order.
type timings struct {
	t     *testing.T
	lines []string
}

func (tm *timings) add(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	tm.t.Logf("TIMING %s", line)
	tm.lines = append(tm.lines, line)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

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
			"-v ./cmd/egressd", libvirtEnvVar)
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
	rows = n.waitRows("vm-2 replaced and Ready on port 8080", 8*time.Minute, readyOrFail(t, "vm-2", func(r fleet.Row) bool {
		return strings.HasSuffix(r.Address, ":8080")
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

// consoles records when each line of the test guests' boot timeline ("egressd-guest: <step>
// uptime=<s>") first appears in their serial console logs, which the provider has libvirt
// write under /var/log/libvirt/qemu. With the guest's uptime in the line, it dates the start
// of the guest's kernel in host time.
type consoles struct {
	mu   sync.Mutex
	seen map[string]time.Time // "<domain> <step>"
}

func watchConsoles(t *testing.T) *consoles {
	c := &consoles{seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			files, _ := filepath.Glob("/var/log/libvirt/qemu/egress-*-serial.log")
			now := time.Now()
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					continue
				}
				domain := strings.TrimSuffix(filepath.Base(f), "-serial.log")
				for _, line := range strings.Split(string(b), "\n") {
					rest, ok := strings.CutPrefix(strings.TrimSpace(line), "egressd-guest: ")
					if step, _, ok2 := strings.Cut(rest, " "); ok && ok2 {
						c.mu.Lock()
						if _, dup := c.seen[domain+" "+step]; !dup {
							c.seen[domain+" "+step] = now
						}
						c.mu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return c
}

func (c *consoles) firstSeen(domain, step string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[domain+" "+step]
	return at, ok
}

// readyOrFail is a waitRows condition: proxy is Ready (and also, when given, also holds),
// and the wait ends at once, with the reason, when the proxy is Invalid or Failed.
func readyOrFail(t *testing.T, proxy string, also func(fleet.Row) bool) func(map[string]fleet.Row) bool {
	last := ""
	return func(rows map[string]fleet.Row) bool {
		failFast(t, rows, proxy)
		r := rows[proxy]
		// Each change of phase or reason is logged, so a slow run shows where it waited.
		if now := fmt.Sprintf("%s %s %s %s", r.Phase, r.Address, r.Reason, r.Message); now != last {
			last = now
			t.Logf("%s: %s", proxy, now)
		}
		ok := also == nil || also(r)
		return r.Phase == events.PhaseReady && ok
	}
}

func failFast(t *testing.T, rows map[string]fleet.Row, proxy string) {
	t.Helper()
	if r, ok := rows[proxy]; ok && (r.Phase == events.PhaseInvalid || r.Phase == events.PhaseFailed) {
		t.Fatalf("%s is %s: %s: %s", proxy, r.Phase, r.Reason, r.Message)
	}
}

// waitForUpload polls the pool directory (a few ms apart: much faster than virsh) until the
// base image is uploaded and verified, which the provider records by writing the digest marker
// last (its content, not just the volume), or an instance's overlay exists; and reports what
// the host held at that moment.
func waitForUpload(t *testing.T, e libvirtEnv, n *node, proxy string, budget time.Duration) (time.Time, string) {
	t.Helper()
	deadline := time.Now().Add(budget)
	lastRows := time.Now()
	for time.Now().Before(deadline) {
		if time.Since(lastRows) > 2*time.Second {
			lastRows = time.Now()
			failFast(t, n.rows(), proxy)
		}
		ents, _ := os.ReadDir(e.poolDir)
		var names []string
		trigger := false
		for _, ent := range ents {
			name := ent.Name()
			names = append(names, name)
			switch {
			case strings.HasPrefix(name, "base-") && strings.HasSuffix(name, ".sha256"):
				if markerWritten(filepath.Join(e.poolDir, name)) {
					trigger = true
					names[len(names)-1] += " (written)"
				}
			case strings.HasPrefix(name, "egress-"):
				trigger = true
			}
		}
		if trigger {
			at := time.Now()
			defs, _ := filepath.Glob("/etc/libvirt/qemu/egress-*.xml")
			return at, fmt.Sprintf("pool files %v, %d domain(s) defined", names, len(defs))
		}
		time.Sleep(3 * time.Millisecond)
	}
	t.Fatalf("no uploaded base image in %s within %s", e.poolDir, budget)
	return time.Time{}, ""
}

// markerWritten: the marker volume holds a digest (a volume is created zero-filled, then
// uploaded into).
func markerWritten(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 64)
	if n, _ := io.ReadFull(f, b); n < 64 {
		return false
	}
	_, err = hex.DecodeString(string(b))
	return err == nil
}

// checkVolumes: the pool holds one base image (and its marker) and, apart from that, only
// volumes of the given instances: no stray from an interrupted create or a replaced instance.
func checkVolumes(t *testing.T, e libvirtEnv, instances []string) {
	t.Helper()
	vols := e.volumes(t)
	var bases, strays []string
	owned := map[string]int{}
	for _, v := range vols {
		switch {
		case strings.HasPrefix(v, "base-"):
			if !strings.HasSuffix(v, ".sha256") {
				bases = append(bases, v)
			}
		default:
			mine := false
			for _, in := range instances {
				if strings.HasPrefix(v, in) {
					owned[in]++
					mine = true
				}
			}
			if !mine {
				strays = append(strays, v)
			}
		}
	}
	if len(bases) != 1 || len(strays) > 0 {
		t.Fatalf("pool %s: base images %v (want one), stray volumes %v; all: %v", e.pool, bases, strays, vols)
	}
	for _, in := range instances {
		if owned[in] == 0 {
			t.Fatalf("pool %s has no volume of %s: %v", e.pool, in, vols)
		}
	}
}

// requireProvider fails at once, and says why, when this egressd does not know the provider
// type typ or refuses the config: egressd builds its providers before anything else, so a
// config error shows within a moment.
func requireProvider(t *testing.T, cfg, typ string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, egressdBin, "run", "--config", cfg, "--data-dir", dir, "--roles", "provisioner",
		"--nats-listen", freeAddr(t), "--metrics-listen", "", "--ui-listen", "", "--check-interval", "0", "--gc-interval", "0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() == nil && err != nil {
		t.Fatalf("egressd run refuses the %s config (is the %s provider wired into egressd run?): %v\n%s", typ, typ, err, out)
	}
}

// staticBinary reports whether the executable at path needs no dynamic loader.
func staticBinary(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// serveOn serves h on addr until the test ends and returns its base URL.
func serveOn(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// curlBody fetches target through the proxy with the real curl, plain or with CONNECT (-p).
func curlBody(t *testing.T, proxyURL, target string, connect bool) string {
	t.Helper()
	args := []string{"-sS", "--max-time", "15", "-x", proxyURL}
	if connect {
		args = append(args, "-p")
	}
	out, err := exec.Command("curl", append(args, target)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s %s: %v\n%s", strings.Join(args, " "), target, err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func orDefaultStr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func netActive(netInfo string) bool {
	for _, line := range strings.Split(netInfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Active" {
			return strings.TrimSpace(v) == "yes"
		}
	}
	return false
}

// libvirtDiagnostics logs what the host holds, for a failed run.
func libvirtDiagnostics(t *testing.T, e libvirtEnv) {
	out, _ := e.virsh("list", "--all")
	t.Logf("virsh list --all:\n%s", out)
	out, _ = e.virsh("vol-list", "--pool", e.pool)
	t.Logf("virsh vol-list %s:\n%s", e.pool, out)
	out, _ = e.virsh("net-dhcp-leases", e.network)
	t.Logf("virsh net-dhcp-leases %s:\n%s", e.network, out)
	for _, d := range e.domains(t) {
		xml, _ := e.virsh("dumpxml", d)
		t.Logf("domain %s:\n%s", d, xml)
		if strings.Contains(xml, "bus='sata'") && e.guestKernel != "generic" {
			t.Logf("NOTE: %s's seed cdrom is on SATA; Debian's cloud kernel has no AHCI driver and cannot see it. "+
				"Build the guest with EGRESSD_LIBVIRT_GUEST_KERNEL=generic, or put the seed on virtio-scsi or IDE.", d)
		}
		if _, raw, err := e.guestBootTimes(d); err == nil {
			t.Logf("%s boot timeline:\n%s", d, raw)
		} else {
			t.Logf("%s boot timeline: %v", d, err)
		}
		if b, err := os.ReadFile(filepath.Join("/var/log/libvirt/qemu", d+".log")); err == nil {
			t.Logf("%s QEMU log (tail):\n%s", d, tail(string(b), 2000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
