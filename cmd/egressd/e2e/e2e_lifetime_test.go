package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// TestLifetimeEnforcedWithoutTheReconciler is issue 24's "maxLifetimeSeconds: 20 with the
// reconciler role stopped: the instance is gone after ~20 s plus one GC interval, by the
// provisioner's collector". A proxy asks for a 20 s lifetime; once its instance runs, the
// reconciler is stopped. The provisioner's orphan collector (every 2 s) deletes the instance
// from its own mark, not before its end, with a gc event LifetimeExceeded, while the status
// nobody updates still names it. The reconciler, started again, gives the proxy a new
// instance and says LifetimeExceeded.
func TestLifetimeEnforcedWithoutTheReconciler(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    local:\n      addresses: [127.0.58.2-127.0.58.250]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "--config", cfg, "--roles", "provisioner", "--gc-interval", "2s")
	rec := startRole(t, dir, n.url, "--config", cfg, "--roles", "reconciler")
	n.nats("kv", "put", "proxies", "short", `{"provider":"local","maxLifetimeSeconds":20}`)
	rows := n.waitRows("short Running with its lifetime's end", time.Minute, func(r map[string]fleet.Row) bool {
		st := r["short"].Status
		return r["short"].Phase == events.PhaseRunning && st != nil && !st.ExpiresAt.IsZero()
	})
	st := *rows["short"].Status
	if life := st.ExpiresAt.Sub(st.ProvisionAt); life < 20*time.Second || life > 30*time.Second {
		t.Fatalf("expiresAt %v is %v after the create began at %v, want 20 s after the instance was made", st.ExpiresAt, life, st.ProvisionAt)
	}
	pid := pidOf(t, dir, st.InstanceName)

	// The reconciler role stops: from here only the provisioner's collector can end it.
	if err := rec.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reconciler to exit", 30*time.Second, func() (bool, string) {
		return syscall.Kill(rec.Process.Pid, 0) != nil, "still running"
	})
	waitUntil(t, "the instance's process to be gone", 2*time.Minute, func() (bool, string) {
		return len(proxyPIDsByInstance(t, dir)[st.InstanceName]) == 0, fmt.Sprintf("pid %d still runs", pid)
	})
	if gone := time.Now(); gone.Before(st.ExpiresAt) {
		t.Fatalf("the instance was deleted at %v, before its lifetime ended at %v", gone, st.ExpiresAt)
	}
	t.Logf("the instance went %s after its lifetime's end (GC interval 2 s)", time.Since(st.ExpiresAt).Round(100*time.Millisecond))
	// Published right after the delete.
	waitUntil(t, "a gc event LifetimeExceeded for "+st.InstanceName, 30*time.Second, func() (bool, string) {
		gc := n.egressd("events", "-f=false", "--kind", "gc")
		return strings.Contains(gc, string(events.ReasonLifetimeExceeded)) && strings.Contains(gc, st.InstanceName), gc
	})
	if now := n.rows()["short"].Status; now == nil || now.Incarnation() != st.Incarnation() {
		t.Fatalf("the status changed with no reconciler running: %+v", now)
	}

	// The reconciler back: a new instance, and the proxy says why.
	startRole(t, dir, n.url, "--config", cfg, "--roles", "reconciler")
	n.waitRows("short Running on a new instance", time.Minute, func(r map[string]fleet.Row) bool {
		now := r["short"].Status
		return r["short"].Phase == events.PhaseRunning && now != nil && now.Incarnation() != st.Incarnation()
	})
	if ph := n.egressd("events", "-f=false", "--kind", "phase"); !strings.Contains(ph, string(events.ReasonLifetimeExceeded)) {
		t.Errorf("no phase event says LifetimeExceeded:\n%s", ph)
	}
}
