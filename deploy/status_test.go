package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `egressd status` as the viewer, which may read statuses but not specs: the denied read of
// proxies fails at once with a message naming the bucket and the permission it lacks,
// instead of waiting out the command's budget, and the rest of the status still prints. The
// real binary against the deployed config.
func TestStatusAsViewer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "egressd")
	build := exec.Command("go", "build", "-o", bin, "../cmd/egressd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build egressd: %v\n%s", err, out)
	}
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	store := declare(t, admin, nil)
	ctx := context.Background()
	if _, err := store.Proxies.Put(ctx, "p1", []byte(`{"provider":"local","auth":{"username":"u","password":"SENTINEL-viewer-pw"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Status.Put(ctx, "p1", []byte(`{"v":1,"phase":"Ready","mode":"managed","provider":"local","ip":"127.0.0.2","port":3128}`)); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, bin, append(args, "--nats-url", ts.srv.ClientURL())...)
		cmd.Env = append(os.Environ(), "EGRESSD_NATS_USER=viewer", "EGRESSD_NATS_PASSWORD="+passwords["viewer"], "EGRESSD_NATS_CA="+ts.caFile)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		err := cmd.Run()
		t.Logf("egressd %s as viewer: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		if err != nil && cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
	stdout, stderr, code := run("status")
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	want := `read bucket proxies: permission denied: the NATS user "viewer" may not publish to "$JS.API.CONSUMER.CREATE.KV_proxies.`
	if !strings.Contains(stderr, want) || strings.Contains(stderr, "deadline") {
		t.Fatalf("stderr does not say which bucket and which permission:\n%s", stderr)
	}
	if strings.Contains(stderr, "nats: permissions violation") {
		t.Fatalf("the client's raw async error reached the user:\n%s", stderr)
	}
	if !strings.Contains(stdout, "p1") || !strings.Contains(stdout, "127.0.0.2:3128") || !strings.Contains(stdout, "Ready") {
		t.Fatalf("the statuses were not printed:\n%s", stdout)
	}
	if strings.Contains(stdout+stderr, "SENTINEL") {
		t.Fatal("a spec's password reached the viewer")
	}
	if stdout, stderr, code := run("status", "providers"); code != 0 || stderr != "" {
		t.Fatalf("status providers: exit %d\n%s%s", code, stdout, stderr)
	}
}
