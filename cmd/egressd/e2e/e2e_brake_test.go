package e2e

import (
	"encoding/json"
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

// TestBrakeHoldsAFleetThatFailsTogether: one proxy that hangs alone is replaced after
// health.replaceAfter; when every proxy of the target hangs at once (as a host's network
// outage looks from the probers), the target is Suspect and none is replaced, however long it
// lasts; once they answer again the fleet is Ready with the very same instances.
func TestBrakeHoldsAFleetThatFailsTogether(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    local:\n      addresses: [127.0.36.2-127.0.36.250]\n      bindSource: true\n"+
		"health:\n  replaceAfter: 3s\n  brakeShare: 50\n  brakeMinimum: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "--config", cfg)
	names := []string{"b1", "b2", "b3", "b4"}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local","healthCheck":{"intervalSeconds":1,"timeoutSeconds":1}}`)
	}
	rows := n.waitRows("four Ready proxies", time.Minute, allPhase(names, events.PhaseReady))

	// One alone: replaced, a new instance at the same name.
	before := incarnations(rows)
	lone := pidOf(t, dir, rows["b1"].Status.InstanceName)
	signal(t, lone, syscall.SIGSTOP)
	start := time.Now()
	rows = n.waitRows("b1 replaced and Ready again", 2*time.Minute, func(r map[string]fleet.Row) bool {
		return r["b1"].Phase == events.PhaseReady && r["b1"].Status.Incarnation() != before["b1"]
	})
	took := time.Since(start)
	t.Logf("a lone Unhealthy proxy was replaced and Ready again %s after it hung (replaceAfter 3s)", took.Round(100*time.Millisecond))

	// All at once: Suspect, nothing replaced.
	before = incarnations(rows)
	var pids []int
	for _, name := range names {
		pids = append(pids, pidOf(t, dir, rows[name].Status.InstanceName))
	}
	for _, pid := range pids {
		signal(t, pid, syscall.SIGSTOP)
	}
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	waitUntil(t, "the target Suspect", time.Minute, func() (bool, string) {
		out := n.egressd("status", "providers", "-o", "json")
		var guards []fleet.ProviderGuard
		if err := json.Unmarshal([]byte(out), &guards); err != nil {
			t.Fatal(err)
		}
		for _, g := range guards {
			for _, tg := range g.Targets {
				if tg.Suspect != nil && tg.Suspect.Unhealthy >= 3 {
					return true, out
				}
			}
		}
		return false, out
	})
	if table := n.egressd("status", "providers"); !strings.Contains(table, "Suspect (") {
		t.Errorf("status providers does not show the brake:\n%s", table)
	}
	// Held for three times what one replacement took, and at least ten replaceAfters: without
	// the brake every proxy would have been replaced by then.
	hold := max(3*took, 30*time.Second)
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		r := n.rows()
		for _, name := range names {
			if got := r[name].Status; got == nil || got.Incarnation() != before[name] {
				t.Fatalf("%s was replaced while its target was Suspect: %s", name, summary(r))
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, pid := range pids {
		signal(t, pid, syscall.SIGCONT)
	}
	rows = n.waitRows("the fleet Ready again", 2*time.Minute, allPhase(names, events.PhaseReady))
	for _, name := range names {
		if got := rows[name].Status.Incarnation(); got != before[name] {
			t.Errorf("%s: instance %s, want the same %s", name, got, before[name])
		}
	}
	ev := n.egressd("events", "-f=false", "--kind", "provider")
	if !strings.Contains(ev, "Suspect") || !strings.Contains(ev, "SuspectCleared") {
		t.Errorf("no Suspect and SuspectCleared provider events:\n%s", ev)
	}
}

func incarnations(rows map[string]fleet.Row) map[string]string {
	m := map[string]string{}
	for name, r := range rows {
		if r.Status != nil {
			m[name] = r.Status.Incarnation()
		}
	}
	return m
}

// pidOf is the forward-proxy process of an instance, found from /proc.
func pidOf(t *testing.T, dir, instance string) int {
	t.Helper()
	pids := proxyPIDsByInstance(t, dir)[instance]
	if len(pids) != 1 {
		t.Fatalf("instance %s has processes %v, want one", instance, pids)
	}
	return pids[0]
}

func signal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(fmt.Errorf("signal %d to %d: %w", sig, pid, err))
	}
}
