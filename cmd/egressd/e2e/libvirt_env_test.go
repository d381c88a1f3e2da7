package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
