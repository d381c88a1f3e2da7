package e2e

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

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
