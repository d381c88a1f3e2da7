package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// The first minutes of a user's egressd (issue 30): a second start on the same data
// directory, a busy port, Ctrl-C during a start, and health that tells a wedged JetStream.
// Elapsed times are logged, and held only to bounds far below the old behaviour's (a 30 s
// wait), so a loaded machine cannot fail them.

// tryRun runs `egressd run` with args to its end (within budget), returning its exit code,
// output and how long it took.
func tryRun(t *testing.T, dir string, budget time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	cmd := exec.CommandContext(ctx, egressdBin, append([]string{"run"}, args...)...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("egressd run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("egressd run %v was still running after %s:\n%s", args, budget, out)
	}
	return cmd.ProcessState.ExitCode(), string(out), took
}

// fileStates maps every file under dir to its size and modification time.
func fileStates(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%d bytes, %s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A second `egressd run` on a data directory in use exits at once, names the directory and
// the process holding it, and changes no file in it; the first keeps serving. The first is
// stopped (SIGSTOP) meanwhile, so that any change found is the second's.
func TestSecondRunOnTheSameDataDirChangesNothing(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir) // the forward proxies outlive egressd by design
	n := startNode(t, dir, "--config", writeConfig(t, dir, 61))
	// Ready, so that its forward proxy (a process of its own, writing under the data
	// directory) is done starting; with egressd frozen, nothing sends it traffic to log.
	n.nats("kv", "put", "proxies", "p1", `{"provider":"local"}`)
	n.waitRows("p1 to be Ready", 60*time.Second, allPhase([]string{"p1"}, events.PhaseReady))
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	before := fileStates(t, data)
	code, out, took := tryRun(t, dir, 20*time.Second, "--data-dir", data, "--nats-listen", freeAddr(t),
		"--metrics-listen", "127.0.0.1:0", "--ui-listen", "127.0.0.1:0")
	after := fileStates(t, data)
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("the second run exited %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	pid := strconv.Itoa(n.cmd.Process.Pid)
	if code == 0 || !strings.Contains(out, "is in use by another egressd (pid "+pid+" ") || !strings.Contains(out, data) {
		t.Errorf("exit %d, want non-zero with the directory and pid %s named", code, pid)
	}
	if took > 10*time.Second {
		t.Errorf("the second run took %s to give up", took)
	}
	for p, st := range before {
		if after[p] != st {
			t.Errorf("%s changed: %s → %s", p, st, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
	if len(before) < 5 {
		t.Errorf("only %d files under the data directory: is it the store?", len(before))
	}
	n.nats("kv", "put", "proxies", "p2", `{"provider":"local"}`) // the first still serves
	if got := n.nats("kv", "get", "proxies", "p2", "--raw"); !strings.Contains(got, "local") {
		t.Errorf("the first egressd after the second's attempt: %q", got)
	}
}

// A busy NATS port ends the start at once, saying what holds it and the way out: a NATS
// server there is offered through --nats-url; another program is named by its pid.
func TestBusyNATSPortFailsFast(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	n := startNode(t, dir)
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, c := range []struct {
		name, addr string
		want       []string
	}{
		{"a NATS server", n.listen, []string{"--nats-listen " + n.listen + ": the address is in use by a NATS server",
			"pass --nats-url nats://" + n.listen}},
		{"another program", plain.Addr().String(), []string{"the address is in use by pid " + strconv.Itoa(os.Getpid()),
			"stop it, or pass another --nats-listen and --data-dir"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			code, out, took := tryRun(t, dir, 20*time.Second, "--data-dir", data, "--nats-listen", c.addr,
				"--metrics-listen", "127.0.0.1:0", "--ui-listen", "127.0.0.1:0")
			t.Logf("exited %d after %s", code, took.Round(time.Millisecond))
			for _, w := range c.want {
				if code == 0 || !strings.Contains(out, w) {
					t.Errorf("exit %d, output lacks %q:\n%s", code, w, out)
				}
			}
			if took > 10*time.Second {
				t.Errorf("took %s to give up", took)
			}
			if _, err := os.Stat(filepath.Join(data, "nats")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the store was opened: %v", err)
			}
		})
	}
	busy := freeAddr(t)
	ln, err := net.Listen("tcp", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, out, _ := tryRun(t, dir, 20*time.Second, "--data-dir", filepath.Join(t.TempDir(), "d"), "--nats-listen", freeAddr(t),
		"--metrics-listen", "127.0.0.1:0", "--ui-listen", busy)
	if code == 0 || !strings.Contains(out, "--ui-listen "+busy+": the address is in use") {
		t.Errorf("a busy status page port: exit %d\n%s", code, out)
	}
}

// Ctrl-C while the start waits (here for an admin to declare the buckets) ends it at once.
func TestInterruptDuringStart(t *testing.T) {
	srv := startNatsServerProc(t)
	logs := &node{t: t}
	cmd := exec.Command(egressdBin, "run", "--nats-url", srv.url, "--roles", "leaser", "--metrics-listen", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	waitUntil(t, "the start to wait for the buckets", 30*time.Second, func() (bool, string) {
		return strings.Contains(logs.logs(), "waiting for the buckets to be declared"), logs.logs()
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-exited:
		t.Logf("ended %s after SIGINT, exit %d", time.Since(start).Round(time.Millisecond), cmd.ProcessState.ExitCode())
	case <-time.After(10 * time.Second):
		t.Fatalf("still starting 10s after SIGINT:\n%s", logs.logs())
	}
}

// /healthz fails once JetStream has not answered for --health-timeout, and passes again when
// it answers; /readyz fails at the first unanswered round trip. The server is frozen with
// SIGSTOP: the TCP connection stays up, so only a round trip can tell.
func TestHealthFollowsJetStream(t *testing.T) {
	srv := startNatsServerProc(t)
	dir := t.TempDir()
	logs := &node{t: t}
	cmd := exec.Command(egressdBin, "run", "--nats-url", srv.url, "--declare", "--roles", "leaser",
		"--metrics-listen", "127.0.0.1:0", "--health-timeout", "4s", "--data-dir", filepath.Join(dir, "data"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var metricsURL string
	waitUntil(t, "egressd to be running", 60*time.Second, func() (bool, string) {
		l := logs.logs()
		if m := metricsURLPattern.FindStringSubmatch(l); m != nil {
			metricsURL = m[1]
		}
		return metricsURL != "" && strings.Contains(l, `msg="egressd running"`), l
	})
	probe := func(path string) (int, string) {
		c := http.Client{Timeout: 5 * time.Second}
		res, err := c.Get(metricsURL + path)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, strings.TrimSpace(string(b))
	}
	waitFor := func(what, path string, code int, body string) {
		t.Helper()
		waitUntil(t, what, 60*time.Second, func() (bool, string) {
			c, b := probe(path)
			return c == code && strings.Contains(b, body), fmt.Sprintf("%d %s", c, b)
		})
	}
	waitFor("/readyz ok", "/readyz", 200, "ok")
	waitFor("/healthz ok", "/healthz", 200, "ok")
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	waitFor("/readyz to fail", "/readyz", 503, "not ready: JetStream does not answer")
	waitFor("/healthz to fail", "/healthz", 503, "unhealthy: JetStream has not answered for")
	t.Logf("/healthz failed %s after the freeze (bound 4s)", time.Since(frozen).Round(time.Millisecond))
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor("/healthz ok again", "/healthz", 200, "ok")
	waitFor("/readyz ok again", "/readyz", 200, "ok")
}

var metricsURLPattern = regexp.MustCompile(`msg="serving /metrics and /healthz" .*?url=(http://\S+)`)

// natsServerProc is a single nats-server process with JetStream, on a loopback port.
type natsServerProc struct {
	url string
	cmd *exec.Cmd
}

func startNatsServerProc(t *testing.T) *natsServerProc {
	t.Helper()
	bin := needNatsServer(t)
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-js", "-a", host, "-p", port, "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitListening(t, addr)
	return &natsServerProc{url: "nats://" + addr, cmd: cmd}
}
