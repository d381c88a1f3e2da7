package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// The README's tour runs as written: every ```sh block between "## A tour" and "## Tests",
// in order, in one bash session (so `reply` and `id` carry from block to block, as in a
// user's terminal), against a running egressd. The output blocks that follow are held to
// their shape: a table's header line, a JSON reply's keys (and its booleans). Between blocks
// the test waits, as a reader does, for the fleet to settle. Three things are mapped, so the
// tour can run beside other tests: the local provider's addresses (127.0.0.N, N ≥ 2) to
// 127.0.66.N, the web server's port 8000 to a free one, and the NATS server to the node's
// (NATS_URL). The nats CLI's install is skipped: the test's bin/ has it.
func TestReadmeTourRunsAsWritten(t *testing.T) {
	needNats(t)
	blocks := tourBlocks(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 66))
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"egressd": egressdBin, "nats": natsBin} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	webPort := strings.Split(freeAddr(t), ":")[1]
	mapText := strings.NewReplacer(":8000", ":"+webPort, " 8000 ", " "+webPort+" ").Replace
	addrs := regexp.MustCompile(`127\.0\.0\.([2-9]|[1-9][0-9]+)\b`)

	store := bindStore(t, n)
	sh := startShell(t, dir, append(n.environ(), "NATS_URL="+n.url, "PATH="+bin+":"+os.Getenv("PATH")))
	for i, b := range blocks {
		if strings.Contains(b.code, "go install") {
			continue
		}
		code := addrs.ReplaceAllString(mapText(b.code), "127.0.66.$1")
		out, ok := sh.run(code, 90*time.Second)
		if !ok {
			t.Fatalf("block %d failed:\n%s\noutput:\n%s", i, code, out)
		}
		t.Logf("block %d:\n%s\n→\n%s", i, code, out)
		if b.want != "" {
			checkShape(t, i, out, b.want)
		}
		if strings.Contains(code, "http.server") {
			waitListening(t, "127.0.0.1:"+webPort)
		}
		waitSettled(t, n, store)
	}
}

// tourBlock is a shell block of the tour and the output block after it, if any.
type tourBlock struct{ code, want string }

// tourBlocks reads the tour's top-level ```sh blocks, each with the plain ``` block that
// follows it before the next shell block.
func tourBlocks(t *testing.T) []tourBlock {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start, end := strings.Index(text, "\n## A tour\n"), strings.Index(text, "\n## Tests\n")
	if start < 0 || end < start {
		t.Fatal(`README.md: no "## A tour" section followed by "## Tests"`)
	}
	var blocks []tourBlock
	fence := regexp.MustCompile("(?m)^```(\\w*)\\n((?s:.*?))^```$")
	for _, m := range fence.FindAllStringSubmatch(text[start:end], -1) {
		switch m[1] {
		case "sh":
			blocks = append(blocks, tourBlock{code: m[2]})
		case "":
			if len(blocks) > 0 && blocks[len(blocks)-1].want == "" {
				blocks[len(blocks)-1].want = m[2]
			}
		}
	}
	if len(blocks) < 10 {
		t.Fatalf("README.md's tour has %d shell blocks; the test expects the whole tour", len(blocks))
	}
	return blocks
}

// checkShape holds out to want's shape: each table header of want is a line of out (same
// columns), each JSON line of want matches one of out in keys and booleans.
func checkShape(t *testing.T, i int, out, want string) {
	t.Helper()
	outLines := strings.Split(out, "\n")
	for _, w := range strings.Split(strings.TrimSpace(want), "\n") {
		switch {
		case strings.HasPrefix(w, "NAME "):
			if !slices.ContainsFunc(outLines, func(l string) bool { return slices.Equal(strings.Fields(l), strings.Fields(w)) }) {
				t.Errorf("block %d: no header %q in the output:\n%s", i, w, out)
			}
		case strings.HasPrefix(w, "{"):
			var wv any
			if err := json.Unmarshal([]byte(w), &wv); err != nil {
				t.Errorf("block %d: the README's JSON %q: %v", i, w, err)
				continue
			}
			if !slices.ContainsFunc(outLines, func(l string) bool {
				var ov any
				return json.Unmarshal([]byte(l), &ov) == nil && sameShape(wv, ov)
			}) {
				t.Errorf("block %d: no reply shaped like %s in the output:\n%s", i, w, out)
			}
		}
	}
}

// sameShape: the same keys at every level, and the same booleans.
func sameShape(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || !sameShape(v, gv) {
				return false
			}
		}
		return true
	case bool:
		return got == w
	default:
		return fmt.Sprintf("%T", want) == fmt.Sprintf("%T", got)
	}
}

// bindStore binds the node's buckets, for the test's own reads.
func bindStore(t *testing.T, n *node) *kvstore.Store {
	t.Helper()
	_, js := n.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := kvstore.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// waitSettled waits, as a reader of the tour does, until every proxy is Ready on its
// current spec and no pool is still changing.
func waitSettled(t *testing.T, n *node, store *kvstore.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitUntil(t, "the fleet to settle", 90*time.Second, func() (bool, string) {
		specs, err := kvstore.Latest(ctx, store.Proxies)
		if err != nil {
			return false, err.Error()
		}
		rows := n.rows()
		for name, r := range rows {
			spec, ok := specs[name]
			if !ok || r.Phase != events.PhaseReady || r.Status == nil || r.Status.SpecRevision != spec.Revision() {
				return false, fmt.Sprintf("%s %s", name, r.Phase)
			}
			// A change rolled successor first is decided while the old instance still
			// serves (Ready at the new revision): settled once the rollout has ended.
			if st := r.Status; st.Rollout != nil || st.Successor != nil || len(st.Retiring) > 0 {
				return false, name + " rolling out"
			}
		}
		pools, err := kvstore.Latest(ctx, store.PoolStatus)
		if err != nil {
			return false, err.Error()
		}
		for name, e := range pools {
			var ps events.PoolStatus
			if json.Unmarshal(e.Value(), &ps) != nil || ps.Phase == events.PoolProgressing {
				return false, "pool " + name + " " + string(ps.Phase)
			}
		}
		return len(rows) == len(specs), fmt.Sprintf("%d rows, %d specs", len(rows), len(specs))
	})
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	waitUntil(t, addr+" to listen", 30*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// shell is one bash process the blocks are written to, as lines typed into a terminal.
type shell struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan string
}

const (
	doneMark  = "__egressd_tour_block_done__"
	errorMark = "__egressd_tour_command_failed__"
)

func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its background jobs die with it
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := &shell{t: t, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer close(sh.lines)
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			sh.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		pw.Close()
	})
	// Every failing command is reported, as a reader would see it fail.
	fmt.Fprintln(stdin, "set -o pipefail; trap 'echo \""+errorMark+" $? at: $BASH_COMMAND\"' ERR")
	return sh
}

// run types code and returns what it printed, and whether every command of it succeeded.
func (sh *shell) run(code string, budget time.Duration) (string, bool) {
	fmt.Fprintf(sh.stdin, "%s\necho \"%s $?\"\n", code, doneMark)
	var out []string
	failed := false
	deadline := time.After(budget)
	for {
		select {
		case l, ok := <-sh.lines:
			if !ok {
				return strings.Join(out, "\n") + "\n(the shell ended)", false
			}
			if rest, ok := strings.CutPrefix(l, doneMark+" "); ok {
				return strings.Join(out, "\n"), rest == "0" && !failed
			}
			failed = failed || strings.HasPrefix(l, errorMark)
			out = append(out, l)
		case <-deadline:
			return strings.Join(out, "\n") + "\n(still running after " + budget.String() + ")", false
		}
	}
}
