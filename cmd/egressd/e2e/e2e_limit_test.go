package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// TestInstanceLimitHoldsTwoPools: a provider with maxInstances 3 under two pools asking for 4
// each has exactly 3 instances (forward-proxy processes, counted from /proc, not from any
// status) at every observation, and both pools say LimitReached; restarted with a limit of 8,
// egressd creates the rest and both pools are Ready. The reconciler's own takeovers are
// TestInstanceLimitHoldsAcrossTakeovers (workers/flowtest).
func TestInstanceLimitHoldsTwoPools(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	writeLimit := func(limit int) {
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("providers:\n  - name: local\n    type: local\n    maxInstances: %d\n"+
			"    local:\n      addresses: [127.0.37.2-127.0.37.250]\n      bindSource: true\n", limit)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeLimit(3)
	n := startNode(t, dir, "--config", cfg)
	instances := func(limit int) int {
		got := len(proxyPIDsByInstance(t, dir))
		if got > limit {
			t.Fatalf("%d instances on a provider limited to %d", got, limit)
		}
		return got
	}
	pools := func() map[string]fleet.PoolRow {
		var rows []fleet.PoolRow
		if err := json.Unmarshal([]byte(n.egressd("status", "pools", "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		m := map[string]fleet.PoolRow{}
		for _, p := range rows {
			m[p.Name] = p
		}
		return m
	}
	for _, pool := range []string{"web", "crawl"} {
		n.nats("kv", "put", "pools", pool, `{"replicas":4,"template":{"provider":"local"}}`)
	}
	waitUntil(t, "3 instances and both pools LimitReached", 2*time.Minute, func() (bool, string) {
		got, p := instances(3), pools()
		return got == 3 && p["web"].Reason == events.ReasonLimitReached && p["crawl"].Reason == events.ReasonLimitReached,
			fmt.Sprintf("%d instances; web %s %s; crawl %s %s", got, p["web"].Phase, p["web"].Reason, p["crawl"].Phase, p["crawl"].Reason)
	})
	// Held: several reconciler passes see the waiting members and create none of them.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got := instances(3); got != 3 {
			t.Fatalf("%d instances while both pools wait, want 3", got)
		}
	}
	if p := pools(); p["web"].Message == "" || p["crawl"].Message == "" {
		t.Errorf("a waiting pool does not say why: %+v", p)
	}

	n.stop()
	writeLimit(8)
	n.start()
	waitUntil(t, "8 instances and both pools Ready", 2*time.Minute, func() (bool, string) {
		got, p := instances(8), pools()
		return got == 8 && p["web"].Ready == 4 && p["crawl"].Ready == 4,
			fmt.Sprintf("%d instances; web %d Ready, crawl %d Ready", got, p["web"].Ready, p["crawl"].Ready)
	})
}
