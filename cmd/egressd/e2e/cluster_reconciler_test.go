package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// Kill -9 of the leading reconciler's process while 20 proxies are being created: the
// standby takes the leader lease once it expires (the time from the kill is printed, next to
// --leader-ttl), every proxy converges, and every op ran once: one final result per op, one
// create per proxy, exactly one forward-proxy process per proxy, no leak after deletion.
func TestClusterReconcilerFailover(t *testing.T) {
	const ttl = 5 * time.Second
	c := startCluster(t, clusterOptions{net: 42, leaderTTL: ttl.String()})
	js := c.jetStream(c.connect("admin"))
	locks, err := js.KeyValue(t.Context(), events.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.reconcilerLeader(locks, nil)

	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("rec-%02d", i))
	}
	proxies, err := js.KeyValue(t.Context(), events.BucketProxies)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := proxies.Put(t.Context(), name, []byte(`{"provider":"local","healthCheck":{"intervalSeconds":2}}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Kill once some, but not all, have an instance: the rest have ops queued or in flight.
	c.admin.waitRows("a few proxies Running", 60*time.Second, func(r map[string]fleet.Row) bool {
		up := 0
		for _, row := range r {
			if row.Address != "" {
				up++
			}
		}
		return up >= 3
	})
	kill := time.Now()
	leader.kill9()
	standby := c.reconcilerLeader(locks, leader)
	takeover := time.Since(kill)
	t.Logf("reconciler leader %d killed; standby %d leads %.2f s later (--leader-ttl %s)", leader.cmd.Process.Pid,
		standby.cmd.Process.Pid, takeover.Seconds(), ttl)

	rows := c.admin.waitRows("all 20 Ready", 3*time.Minute, allPhase(names, events.PhaseReady))
	perInstance := proxyProcsByInstance(t, c.dir)
	for _, name := range names {
		inst := rows[name].Status.InstanceName
		if n := perInstance[inst]; n != 1 {
			t.Errorf("%s (%s): %d forward-proxy processes, want 1", name, inst, n)
		}
	}
	if n := len(proxyProcs(t, c.dir)); n != len(names) {
		t.Errorf("%d forward-proxy processes, want %d", n, len(names))
	}
	if n := instanceDirs(t, c.dataDir()); n != len(names) {
		t.Errorf("%d instance directories, want %d", n, len(names))
	}
	results := opResults(t, js)
	finals, creates := map[string]int{}, map[string]map[string]bool{}
	for _, r := range results {
		if r.Final {
			finals[r.OpID]++
		}
		if r.Kind == events.OpCreate {
			if creates[r.Proxy] == nil {
				creates[r.Proxy] = map[string]bool{}
			}
			creates[r.Proxy][r.OpID] = true
		}
	}
	for id, n := range finals {
		if n != 1 {
			t.Errorf("op %s has %d final results, want 1", id, n)
		}
	}
	for _, name := range names {
		if n := len(creates[name]); n != 1 {
			t.Errorf("%s: %d create ops ran, want 1", name, n)
		}
	}
	t.Logf("RELIABILITY {\"test\":\"reconciler-leader\",\"leaderTTLMs\":%d,\"takeoverMs\":%d,\"proxies\":%d,\"opResults\":%d,\"ops\":%d}",
		ttl.Milliseconds(), takeover.Milliseconds(), len(names), len(results), len(finals))

	// The killed process comes back as the standby; deletions leave nothing behind.
	leader.start()
	for _, name := range names {
		if err := proxies.Delete(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	c.admin.waitRows("every proxy gone", 2*time.Minute, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	if pids := proxyProcs(t, c.dir); len(pids) != 0 {
		t.Fatalf("forward proxies left: %v", pids)
	}
}

// reconcilerLeader waits until a reconciler process other than not holds the leader lease
// and returns it; the lock's holder names the process (identity: <host>-<pid>-<n>).
func (c *cluster) reconcilerLeader(locks jetstream.KeyValue, not *node) *node {
	c.t.Helper()
	return c.leaderOf(locks, events.LockLeaderReconciler, not)
}

// leaderOf is the reconciler process (other than not) holding the leader lease key: the
// reconciler's own, or the pool controller's, which runs in the same processes.
func (c *cluster) leaderOf(locks jetstream.KeyValue, key string, not *node) *node {
	c.t.Helper()
	var found *node
	waitUntil(c.t, "a leader of "+key, time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		raw, _, err := kvstore.Get(ctx, locks, key)
		if errors.Is(err, kvstore.ErrNotFound) {
			return false, "no leader"
		} else if err != nil {
			return false, err.Error()
		}
		var rec events.LockRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return false, err.Error()
		}
		parts := strings.Split(rec.Holder, "-")
		pid, _ := strconv.Atoi(parts[max(len(parts)-2, 0)])
		for _, n := range c.roles["reconciler"] {
			if n != not && n.cmd.Process.Pid == pid {
				found = n
				return true, ""
			}
		}
		return false, "held by " + rec.Holder
	})
	return found
}

// proxyProcsByInstance counts the live forward-proxy processes under dir by the instance
// name on their command line (--instance).
func proxyProcsByInstance(t *testing.T, dir string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for inst, pids := range proxyPIDsByInstance(t, dir) {
		n[inst] = len(pids)
	}
	return n
}

// proxyPIDsByInstance lists the live forward-proxy processes under dir by the instance each
// serves (its --instance argument).
func proxyPIDsByInstance(t *testing.T, dir string) map[string][]int {
	t.Helper()
	n := map[string][]int{}
	for _, pid := range proxyProcs(t, dir) {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		for i, a := range args {
			if a == "--instance" && i+1 < len(args) {
				n[args[i+1]] = append(n[args[i+1]], pid)
			}
		}
	}
	return n
}

// instanceDirs counts the local provider's instance directories.
func instanceDirs(t *testing.T, dataDir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "local", "local"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	dirs := 0
	for _, e := range ents {
		if e.IsDir() {
			dirs++
		}
	}
	return dirs
}

// opResults reads every op result on EGRESS_EVENTS so far.
func opResults(t *testing.T, js jetstream.JetStream) []events.OpResult {
	t.Helper()
	var out []events.OpResult
	for _, e := range readEvents(t, js, events.OpResultSubjects) {
		if e.Op == nil {
			t.Fatalf("op event %s without a result", e.ID)
		}
		out = append(out, *e.Op)
	}
	return out
}

// readEvents reads every event on EGRESS_EVENTS so far whose subject matches filter.
func readEvents(t *testing.T, js jetstream.JetStream, filter string) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	// A pull may find no responder while the new consumer's interest spreads over the
	// cluster; the ordered consumer picks up where it was, so the read is tried again.
	for pending, fails := info.NumPending, 0; pending > 0; pending-- {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil && fails < 20 && ctx.Err() == nil {
			fails++
			pending++
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("read events %s: %v", filter, err)
		}
		var e events.Event
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatalf("event %s: %v", m.Data(), err)
		}
		out = append(out, e)
	}
	return out
}
