package local

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"go.uber.org/goleak"
)

// The test binary doubles as the programs the provider runs, chosen by its first argument:
//
//	forward-proxy <flags>                        egressd forward-proxy
//	forward-proxy-stall <file> <flags>           the same, but the proxy (not the intermediate)
//	                                             waits while <file> exists before it listens
//	provision <config json> <name> <uid> <port>  a provisioner process that runs one Create
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "forward-proxy":
			os.Exit(forwardproxy.Main(context.Background(), os.Args[2:], os.Stderr))
		case "forward-proxy-stall":
			stall, args := os.Args[2], os.Args[3:]
			if !slices.Contains(args, "--detach") {
				for deadline := time.Now().Add(30 * time.Second); exists(stall) && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
				}
			}
			os.Exit(forwardproxy.Main(context.Background(), args, os.Stderr))
		case "provision":
			os.Exit(provisionMain(os.Args[2:]))
		}
	}
	// A race-enabled binary sleeps a second before it exits, to catch late reports; every
	// intermediate and every stopped proxy would pay it.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// No goroutine may outlive the tests: every one the provider starts has an owner.
	goleak.VerifyTestMain(m)
}

func provisionMain(args []string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := New("local", cfg, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	port, _ := strconv.Atoi(args[3])
	inst, err := p.Create(context.Background(), providers.CreateRequest{
		Name: args[1], UID: args[2], Installation: testInstallation, Host: "local", Port: port,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(inst.ID, inst.State, inst.Address)
	return 0
}

const testInstallation = "test-installation"

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var blockSeq atomic.Int32

// testAddresses returns a block of loopback addresses no other provider of this test run
// uses, away from the 127.0.0.x that other tests on the machine may take.
func testAddresses(n int) string {
	b := blockSeq.Add(1)
	return fmt.Sprintf("127.77.%d.1-127.77.%d.%d", b, b, n)
}

// freePort returns a port that was free on 127.0.0.1 a moment ago; instances in a test use it
// on their own addresses.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// testConfig is a config over a fresh state dir and address block. Every process the test
// leaves behind under that state dir is reported and killed when the test ends.
func testConfig(t *testing.T, poolSize int) Config {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		if pids := processesUnder(dir); len(pids) > 0 {
			t.Errorf("processes left running under %s: %v", dir, pids)
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return Config{StateDir: dir, Addresses: []string{testAddresses(poolSize)}, Binary: testBinary(t)}
}

func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New("local", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// reopen builds a new provider object over p's state, as a restarted provisioner would.
func reopen(t *testing.T, p *Provider) *Provider {
	t.Helper()
	q := newProvider(t, p.cfg)
	q.lockTimeout, q.startTimeout, q.readyTimeout, q.stopGrace = p.lockTimeout, p.startTimeout, p.readyTimeout, p.stopGrace
	return q
}

// processesUnder lists live processes with an argument inside dir.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for arg := range strings.SplitSeq(string(cmdline), "\x00") {
			if strings.HasPrefix(arg, dir+string(filepath.Separator)) && alive(pid, arg) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// proxies lists the live proxy processes of an instance (not intermediates).
func proxies(p *Provider, name string) []int {
	var out []int
	for _, pid := range findProcesses(p.pidPath(name)) {
		if !hasArg(filepath.Join("/proc", strconv.Itoa(pid)), "--detach") {
			out = append(out, pid)
		}
	}
	return out
}

func request(name string, port int) providers.CreateRequest {
	return providers.CreateRequest{
		Name:         name,
		UID:          "uid-" + name,
		Installation: testInstallation,
		Proxy:        "proxy-" + name,
		Host:         "local",
		Port:         port,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, p *Provider, req providers.CreateRequest) providers.Instance {
	t.Helper()
	inst, err := p.Create(ctxT(t), req)
	if err != nil {
		t.Fatalf("Create(%s): %v", req.Name, err)
	}
	if inst.State != providers.StateRunning || inst.Address == "" {
		t.Fatalf("Create(%s) = %+v, want Running with an address", req.Name, inst)
	}
	t.Cleanup(func() { p.Delete(context.Background(), inst.ID) })
	return inst
}

func mustGet(t *testing.T, p *Provider, id string) providers.Instance {
	t.Helper()
	inst, err := p.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return inst
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stalling is a config whose proxies wait, before they listen, while the returned file exists.
func stalling(t *testing.T, poolSize int) (Config, string) {
	t.Helper()
	cfg := testConfig(t, poolSize)
	stall := filepath.Join(t.TempDir(), "stall")
	if err := os.WriteFile(stall, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.BinaryArgs = []string{"forward-proxy-stall", stall}
	return cfg, stall
}

type createResult struct {
	inst providers.Instance
	err  error
}

// createAsync runs a Create in the background; its result comes on the channel.
func createAsync(t *testing.T, p *Provider, req providers.CreateRequest) <-chan createResult {
	done := make(chan createResult, 1)
	ctx := ctxT(t)
	go func() {
		inst, err := p.Create(ctx, req)
		done <- createResult{inst, err}
	}()
	return done
}
