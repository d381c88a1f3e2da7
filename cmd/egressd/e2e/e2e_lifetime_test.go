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

// TestPoolReplacesMembersAheadOfTheirLifetime: a pool whose template sets a 60 s lifetime
// replaces its members successor-first well before it ends (at the end less the drain timeout
// and five minutes, here half the lifetime), so neither the reconciler nor the collector has to
// end an instance that still serves: never fewer than replicas Ready members, events
// LifetimeEnding, no LifetimeExceeded for the first members.
func TestPoolReplacesMembersAheadOfTheirLifetime(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 59), "--gc-interval", "2s")
	w := watchPool(t, n, "short")
	n.nats("kv", "put", "pools", "short", `{"template":{"provider":"local","maxLifetimeSeconds":60,`+poolHealth+`},"replicas":2,"rotation":{"drainTimeoutSeconds":5}}`)
	rows := n.waitRows("2 Ready members with a lifetime", time.Minute, poolReady("short", 2, func(r fleet.Row) bool {
		return r.Status != nil && !r.Status.ExpiresAt.IsZero()
	}))
	w.arm()
	first := map[string]string{} // member → its instance
	for _, m := range members(rows, "short") {
		first[m.Name] = m.Status.InstanceName
	}
	n.waitRows("both first members replaced", 2*time.Minute, func(r map[string]fleet.Row) bool {
		for name := range first {
			if _, ok := r[name]; ok {
				return false
			}
		}
		return poolReady("short", 2, nil)(r)
	})
	if _, minReady := w.stats(); minReady < 2 {
		t.Errorf("%d Ready members at one point while replacing, want 2 (successor-first)", minReady)
	}
	if ev := n.egressd("events", "-f=false", "--kind", "pool"); !strings.Contains(ev, string(events.ReasonLifetimeEnding)) {
		t.Errorf("no pool event LifetimeEnding:\n%s", ev)
	}
	ev := n.egressd("events", "-f=false", "--kind", "gc,phase")
	for name, inst := range first {
		for line := range strings.Lines(ev) {
			if strings.Contains(line, string(events.ReasonLifetimeExceeded)) && (strings.Contains(line, name) || strings.Contains(line, inst)) {
				t.Errorf("member %s's instance %s reached its lifetime's end instead of being replaced ahead of it: %s", name, inst, line)
			}
		}
	}
}
