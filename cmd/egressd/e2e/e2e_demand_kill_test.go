package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// Issue 23, "Must be true": kill -9 of the process running the pool controller and of a
// leaser during a demand step. The roles run as processes of their own on one NATS: the node
// (NATS, provisioner, prober), two reconcilers (the pool controller runs with the one that
// leads; the other stands by) and two leasers. Forty crawlers acquire with waits on an
// autoscaled pool (max 5, maxLeases 2); while it grows, the leading reconciler and a leaser
// are killed -9. The pool never has more than 5 members at any observation, no request is
// answered twice (the killed leaser's waiters are not answered at all; their crawlers ask
// again), the standby takes the pool over and it converges: 5 Ready members serving the
// crowd, and back to zero after it.
func TestPoolDemandStepSurvivesKills(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 51)
	appendConfig(t, cfg, "leases:\n  demandWindow: 5s\n")
	n := startNode(t, dir, "--config", cfg, "--roles", "provisioner,prober")
	w := watchPool(t, n, "kill")
	recA := startRole(t, dir, n.url, "--config", cfg, "--roles", "reconciler", "--leader-ttl", "3s")
	waitUntil(t, "reconciler A leading", 30*time.Second, func() (bool, string) {
		out := n.nats("kv", "ls", "egress_locks")
		return strings.Contains(out, events.LockLeaderReconciler), out
	})
	startRole(t, dir, n.url, "--config", cfg, "--roles", "reconciler", "--leader-ttl", "3s")
	leaserA := startRole(t, dir, n.url, "--config", cfg, "--roles", "leaser")
	startRole(t, dir, n.url, "--config", cfg, "--roles", "leaser")
	nc, _ := n.client()
	// The crawlers start once both leasers serve: one that meets no responders stops.
	waitLeaseService(t, nc, 2)

	putDemandPool(t, n, "kill")
	c := startCrowd(t, nc, 500*time.Millisecond, func(i int) string {
		return fmt.Sprintf(`{"selector":{"pool":"kill"},"ttlSeconds":30,"waitSeconds":10,"holder":"crawler-%d"}`, i)
	})
	c.wait, c.lossy = 20*time.Second, true
	c.run(40)

	// Mid-step: the pool has begun to grow, not finished.
	waitUntil(t, "the pool growing", 120*time.Second, func() (bool, string) {
		return w.count() > 0, fmt.Sprint(w.count(), " members")
	})
	for _, p := range []struct {
		name string
		pid  int
	}{{"the leading reconciler", recA.Process.Pid}, {"a leaser", leaserA.Process.Pid}} {
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %s: %v", p.name, err)
		}
	}
	t.Logf("killed the leading reconciler and a leaser at %d members", w.count())

	n.waitRows("5 Ready members under the standby", 180*time.Second, poolReady("kill", 5, nil))
	served := c.granted.Load()
	waitUntil(t, "crawlers served after the kills", 120*time.Second, func() (bool, string) {
		return c.granted.Load() >= served+40, fmt.Sprint(c.granted.Load()-served, " granted since")
	})
	c.halt()
	n.waitRows("back to zero members", 180*time.Second, func(rows map[string]fleet.Row) bool {
		return len(members(rows, "kill")) == 0
	})
	for _, twice := range c.answeredTwice() {
		t.Errorf("a request answered twice: %s", twice)
	}
	if highest, _ := w.stats(); highest > 5 {
		t.Errorf("the pool had %d members at one point; autoscale max is 5", highest)
	}
	if p := c.peak.Load(); p > 10 {
		t.Errorf("the crawlers held %d leases at once; 5 members of maxLeases 2 hold 10", p)
	}
	t.Logf("%d leases granted, %d waits timed out, %d requests unanswered (the killed leaser's)", c.granted.Load(), c.timeout.Load(), c.lost.Load())
}
