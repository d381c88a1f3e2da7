package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// exitProblems is the exit code of status --check when something is Invalid or Failed
// (docs/proxyspec.md, docs/pools.md).
const exitProblems = 3

// result is what a run of the egressd binary printed, and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// runEgressd runs the binary with stdin, in dir, and returns what it printed.
func runEgressd(t testing.TB, dir, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, egressdBin, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("egressd %s: %v", strings.Join(args, " "), err)
	}
	return result{out.String(), errOut.String(), cmd.ProcessState.ExitCode()}
}

// egressdAt runs another egressd command against the node, whatever its exit code.
func (n *node) egressdAt(stdin string, args ...string) result {
	n.t.Helper()
	return runEgressd(n.t, n.dir, stdin, append(args, "--nats-url", n.url)...)
}

// `egressd validate` accepts what the reconciler and the pool controller act on, and lists
// every problem of a document that they would not, each naming its field.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kvm.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: kvm-home\n    type: local\n  - name: local\n    type: local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pool.json"), []byte(`{"template":{"provider":"local"},"replicas":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string // each printed (stdout for 0, stderr otherwise)
	}{
		{"good proxy", []string{"proxy", "-"}, `{"provider":"local"}`, 0, []string{"a valid proxy document"}},
		{"good external proxy", []string{"proxy", "-"}, `{"mode":"external","endpoint":{"host":"10.0.0.5"}}`, 0, []string{"valid"}},
		{"good pool from a file", []string{"pool", "pool.json"}, "", 0, []string{"pool.json: a valid pool document"}},
		{"unknown provider", []string{"pool", "-"}, `{"template":{"provider":"nope"},"replicas":1}`, 1,
			[]string{`template.provider: unknown provider "nope" (known: local)`, "(1 problem)"}},
		{"a provider of the config", []string{"pool", "-", "--config", "kvm.yaml"}, `{"template":{"provider":"kvm-home"},"replicas":1}`, 0, []string{"providers: kvm-home, local"}},
		{"flags before the kind's arguments", []string{"--config", "kvm.yaml", "proxy", "-"}, `{"provider":"kvm-home"}`, 0, []string{"valid"}},
		{"every problem of a proxy", []string{"proxy", "-"}, `{"provider":"nope","prot":1,"maxLeases":-1,"healthCheck":{"intervalSeconds":0,"url":"ftp://x"}}`, 1,
			[]string{"(4 problems)", "prot: unknown field", "maxLeases: must be between 0 and 10000, got -1",
				"healthCheck.url: must be an absolute http or https URL", `provider: unknown provider "nope"`}},
		{"every problem of a pool", []string{"pool", "-"}, `{"template":{"provider":"nope","port":70000},"replcias":3,"spread":"x"}`, 1,
			[]string{"(5 problems)", "replcias: unknown field", "template.port: must be between 1 and 65535", "replicas: is required",
				"spread: must be", `template.provider: unknown provider "nope"`}},
		{"a wrong type and an unknown provider", []string{"proxy", "-"}, `{"provider":"nope","port":"x"}`, 1,
			[]string{"port: must be an integer, not a JSON string", `provider: unknown provider "nope"`}},
		{"broken JSON", []string{"proxy", "-"}, `{"provider":`, 1, []string{"(document): empty or truncated JSON"}},
		{"no file", []string{"proxy", "missing.json"}, "", 2, []string{"missing.json"}},
		{"unknown kind", []string{"proxies", "-"}, "{}", 2, []string{`unknown kind "proxies" (proxy or pool)`}},
		{"no kind", nil, "", 2, []string{"usage: egressd validate proxy|pool FILE"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runEgressd(t, dir, tc.stdin, append([]string{"validate"}, tc.args...)...)
			out := r.stderr
			if tc.code == 0 {
				out = r.stdout
			}
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// docRig is a node and the two buckets users write, for the document tests.
type docRig struct {
	*node
	ctx            context.Context
	proxies, pools jetstream.KeyValue
}

func newDocRig(t *testing.T, net int) *docRig {
	dir := t.TempDir()
	n := startNode(t, dir, "--config", writeConfig(t, dir, net))
	t.Cleanup(func() { killProcs(t, dir) })
	_, js := n.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := &docRig{node: n, ctx: ctx}
	var err error
	if r.proxies, err = js.KeyValue(ctx, events.BucketProxies); err != nil {
		t.Fatal(err)
	}
	if r.pools, err = js.KeyValue(ctx, events.BucketPools); err != nil {
		t.Fatal(err)
	}
	return r
}

// absent fails the test if kv holds key.
func (r *docRig) absent(kv jetstream.KeyValue, key string) {
	r.t.Helper()
	if e, err := kv.Get(r.ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		r.t.Fatalf("%s/%s: %v %v; want nothing written", kv.Bucket(), key, e, err)
	}
}

// apply writes only valid documents, as given, and prints their revision; delete deletes.
func TestApplyWritesOnlyValidDocuments(t *testing.T) {
	rig := newDocRig(t, 63)
	n, ctx, proxies, pools, absent := rig.node, rig.ctx, rig.proxies, rig.pools, rig.absent

	// Refused: nothing is written.
	r := n.egressdAt(`{"template":{"provider":"nope"},"replicas":2}`, "apply", "pool", "web", "-")
	if r.code != 1 || !strings.Contains(r.stderr, `template.provider: unknown provider "nope" (known: local)`) || !strings.Contains(r.stderr, "nothing written") {
		t.Fatalf("apply of a pool on an unknown provider: %+v", r)
	}
	absent(pools, "web")
	r = n.egressdAt(`{"provider":"local","port":0,"maxLeases":-3}`, "apply", "proxy", "Bad_Name", "-")
	if r.code != 1 || !strings.Contains(r.stderr, "(name): ") || !strings.Contains(r.stderr, "maxLeases: ") {
		t.Fatalf("apply of a bad proxy under a bad name: %+v", r)
	}
	absent(proxies, "Bad_Name")
	// The live catalog has the hosts: a zone that is not one is refused, as the reconciler would.
	r = n.egressdAt(`{"provider":"local","placement":{"zone":"elsewhere"}}`, "apply", "proxy", "p0", "-")
	if r.code != 1 || !strings.Contains(r.stderr, `placement.zone: "elsewhere" is not a host of provider "local"`) {
		t.Fatalf("apply of a proxy on a zone that is not a host: %+v", r)
	}
	absent(proxies, "p0")

	// Accepted: written as given, with its revision printed.
	const ext = `{"mode":"external","endpoint":{"host":"127.0.0.1","port":9}}`
	r = n.egressdAt(ext, "apply", "proxy", "ext1", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "proxy ext1 written to proxies, revision ") {
		t.Fatalf("apply of a valid proxy: %+v", r)
	}
	if e, err := proxies.Get(ctx, "ext1"); err != nil || string(e.Value()) != ext || !strings.Contains(r.stdout, "revision "+strconv.FormatUint(e.Revision(), 10)) {
		t.Fatalf("proxies/ext1 after apply: %v, %v; printed %q", e, err, r.stdout)
	}
	if r = n.egressdAt(`{"template":{"provider":"local"},"replicas":0}`, "apply", "pool", "idle", "-"); r.code != 0 {
		t.Fatalf("apply of a valid pool: %+v", r)
	}
	n.waitRows("ext1 to have a status", 30*time.Second, func(rows map[string]fleet.Row) bool { _, ok := rows["ext1"]; return ok })
	for _, del := range [][]string{{"proxy", "ext1"}, {"pool", "idle"}} {
		if r = n.egressdAt("", append([]string{"delete"}, del...)...); r.code != 0 || !strings.Contains(r.stdout, del[1]+" deleted") {
			t.Fatalf("delete %v: %+v", del, r)
		}
	}
	absent(proxies, "ext1")
	absent(pools, "idle")
	if r = n.egressdAt("", "delete", "pool", "idle"); r.code != 1 || !strings.Contains(r.stderr, `no pool named "idle" in pools`) {
		t.Fatalf("delete of a missing pool: %+v", r)
	}
}

// status --check fails on Invalid proxies and pools; a pool on an unknown provider written
// anyway (as nats kv put does) is Invalid, with an event, and creates no member.
func TestCheckAndInvalidPool(t *testing.T) {
	rig := newDocRig(t, 64)
	n, ctx, proxies, pools, absent := rig.node, rig.ctx, rig.proxies, rig.pools, rig.absent
	var r result
	if _, err := pools.Put(ctx, "idle", []byte(`{"template":{"provider":"local"},"replicas":0}`)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pool idle to be Ready", 30*time.Second, func() (bool, string) {
		r = n.egressdAt("", "status", "pools", "--check")
		return r.code == 0 && strings.Contains(r.stdout, "idle   Ready"), r.stdout + r.stderr
	})
	if r = n.egressdAt("", "status", "--check"); r.code != 0 {
		t.Fatalf("status --check with nothing Invalid: %+v", r)
	}

	// Written anyway, past validation: an Invalid proxy, and a pool on an unknown provider.
	if _, err := proxies.Put(ctx, "broken", []byte(`{"provider":"local","port":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Put(ctx, "bad", []byte(`{"template":{"provider":"nope"},"replicas":2}`)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pool bad to be Invalid", 30*time.Second, func() (bool, string) {
		r = n.egressdAt("", "status", "pools", "--check")
		return r.code == exitProblems && strings.Contains(r.stderr, "pool bad is Invalid: "+`template.provider: unknown provider "nope" (known: local)`), r.stdout + r.stderr
	})
	if !strings.Contains(r.stdout, "UnknownProvider") || strings.Contains(r.stderr, "idle") {
		t.Fatalf("status pools --check: %+v", r)
	}
	waitUntil(t, "status --check to name both", 30*time.Second, func() (bool, string) {
		r = n.egressdAt("", "status", "--check")
		return r.code == exitProblems && strings.Contains(r.stderr, "proxy broken is Invalid: port: must be an integer") &&
			strings.Contains(r.stderr, "pool bad is Invalid") && strings.Contains(r.stderr, "2 Invalid or Failed"), r.stderr
	})
	ev := n.egressdAt("", "events", "-f=false", "--kind", "pool", "--proxy", "bad")
	if ev.code != 0 || !strings.Contains(ev.stdout, "UnknownProvider") || !strings.Contains(ev.stdout, `template.provider: unknown provider "nope"`) {
		t.Fatalf("no event of the Invalid pool: %+v", ev)
	}
	// No member, then or ever: the pool is judged before anything is created.
	keys, err := proxies.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "bad-") {
			t.Errorf("the Invalid pool created member %s", k)
		}
	}

	// delete: the key goes; a missing one is an error.
	for _, del := range [][]string{{"proxy", "broken"}, {"pool", "bad"}} {
		if r = n.egressdAt("", append([]string{"delete"}, del...)...); r.code != 0 || !strings.Contains(r.stdout, del[1]+" deleted") {
			t.Fatalf("delete %v: %+v", del, r)
		}
	}
	absent(proxies, "broken")
	waitUntil(t, "status --check to pass again", 30*time.Second, func() (bool, string) {
		r = n.egressdAt("", "status", "--check")
		return r.code == 0, r.stderr
	})
}
