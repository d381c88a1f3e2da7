package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The end-to-end tests drive the real binary (built once, from cmd/egressd) and the real nats
// CLI; they are the README's quickstart, made to fail loudly. They see egressd only from
// outside: its commands, flags, environment, exit codes, output and what it writes to NATS.
var (
	egressdBin string
	natsBin    string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "egressd-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	egressdBin = filepath.Join(dir, "egressd")
	build := exec.Command("go", "build", "-o", egressdBin, "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building egressd for the end-to-end tests:", err)
		os.Exit(1)
	}
	natsBin = findNats()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// findNats looks for the nats CLI on PATH and in the repository's bin/ (where `make tools`
// puts it).
func findNats() string {
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if p, err := filepath.Abs("../../../bin/nats"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func needNats(t testing.TB) {
	t.Helper()
	if natsBin == "" {
		t.Fatal("the nats CLI is required: run `make tools` (go install github.com/nats-io/natscli/nats@v0.5.0)")
	}
}

// node is one `egressd run` process.
type node struct {
	t      testing.TB
	dir    string
	url    string
	listen string
	args   []string
	bin    string   // the egressd binary it runs; "" is the current build
	env    []string // added to the test's environment, less its OTEL_* variables, for every command it runs
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	starts int // how many times this node has come up
}

// freeAddr reserves a loopback port for a server the test starts next.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeConfig writes a config whose local provider hands out addresses from 127.0.<net>.x,
// so tests running side by side never compete for an address.
func writeConfig(t testing.TB, dir string, net int) string {
	t.Helper()
	p := filepath.Join(dir, "egressd.yaml")
	cfg := fmt.Sprintf("providers:\n  - name: local\n    type: local\n    local:\n      addresses: [127.0.%d.2-127.0.%d.250]\n      bindSource: true\n", net, net)
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func startNode(t testing.TB, dir string, extra ...string) *node {
	t.Helper()
	return startNodeEnv(t, dir, nil, extra...)
}

// startNodeEnv starts a node with env added to its environment.
func startNodeEnv(t testing.TB, dir string, env []string, extra ...string) *node {
	t.Helper()
	n := &node{t: t, dir: dir, listen: freeAddr(t), env: env}
	n.url = "nats://" + n.listen
	n.args = append([]string{"run", "--data-dir", filepath.Join(dir, "data"), "--nats-listen", n.listen, "--metrics-listen", "127.0.0.1:0", "--ui-listen", "127.0.0.1:0", "--log-level", "debug"}, extra...)
	// Registered before the start, so a node that never says it is running is stopped too.
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("egressd log:\n%s", n.logs())
		}
	})
	n.start()
	return n
}

func (n *node) start() {
	n.t.Helper()
	n.cmd = exec.Command(cmp.Or(n.bin, egressdBin), n.args...)
	n.cmd.Dir = n.dir
	n.cmd.Env = n.environ()
	n.cmd.Stdout, n.cmd.Stderr = n, n
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(n.cmd, n.exited)
	// Ready when it says so: NATS listens, buckets and streams are declared, roles started.
	waitUntil(n.t, "egressd to be running", 30*time.Second, func() (bool, string) {
		return strings.Count(n.logs(), `msg="egressd running"`) > n.starts, "not yet"
	})
	n.starts++
}

// environ is the test's environment without its OTEL_* variables (tracing is what a test
// asks for, whatever the machine's environment says), plus the node's own.
func (n *node) environ() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	return append(env, n.env...)
}

func (n *node) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.Write(p)
}

func (n *node) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// kill9 kills egressd run at once, as a crash would; its forward proxies live on.
func (n *node) kill9() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// stop asks egressd to shut down and returns its exit code.
func (n *node) stop() int {
	if n.exited == nil { // never started
		return -1
	}
	select {
	case <-n.exited:
		return n.cmd.ProcessState.ExitCode()
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.t.Errorf("egressd did not stop within 20s of SIGTERM")
		n.kill9()
	}
	return n.cmd.ProcessState.ExitCode()
}

// nats runs the real nats CLI against the node.
func (n *node) nats(args ...string) string {
	n.t.Helper()
	needNats(n.t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsBin, append([]string{"-s", n.url}, args...)...)
	cmd.Env = n.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// egressd runs another egressd command (status) against the node.
func (n *node) egressd(args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, egressdBin, append(args, "--nats-url", n.url)...)
	cmd.Env = n.environ()
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("egressd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// client is a connection of the test's own to the node's NATS, as a crawler or an operator's
// tool has, closed when the test ends.
func (n *node) client() (*nats.Conn, jetstream.JetStream) {
	n.t.Helper()
	nc, err := nats.Connect(n.url)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	return nc, js
}

func (n *node) rows() map[string]fleet.Row {
	n.t.Helper()
	var rows []fleet.Row
	if err := json.Unmarshal([]byte(n.egressd("status", "-o", "json")), &rows); err != nil {
		n.t.Fatal(err)
	}
	m := map[string]fleet.Row{}
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}

// waitRows waits until cond holds for the status rows.
func (n *node) waitRows(what string, budget time.Duration, cond func(map[string]fleet.Row) bool) map[string]fleet.Row {
	n.t.Helper()
	var rows map[string]fleet.Row
	waitUntil(n.t, what, budget, func() (bool, string) {
		rows = n.rows()
		return cond(rows), summary(rows)
	})
	return rows
}

func summary(rows map[string]fleet.Row) string {
	var b strings.Builder
	for name, r := range rows {
		fmt.Fprintf(&b, "%s=%s(%s %s) ", name, r.Phase, r.Address, r.Reason)
	}
	return b.String()
}

func waitUntil(t testing.TB, what string, budget time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(budget)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", budget, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// proxyProcs lists the live forward-proxy processes whose files are under dir, from /proc
// and independently of the provider's own bookkeeping.
func proxyProcs(t testing.TB, dir string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || args[1] != "forward-proxy" || !strings.Contains(string(cmdline), dir) || slices.Contains(args, "--detach") {
			continue // not ours, or the short-lived starter of a proxy rather than a proxy
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // a zombie is not a running proxy
		}
		pids = append(pids, pid)
	}
	return pids
}

// killProcs removes whatever a failed test left running.
func killProcs(t testing.TB, dir string) {
	for _, pid := range proxyProcs(t, dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
