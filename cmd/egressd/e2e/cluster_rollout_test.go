package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// A proxy of its own rolled successor first survives kill -9 of the leading reconciler in
// each of its stages (decision 98): killed while Surging (the status records the successor,
// its create sent or not), the standby takes over and switches to that successor (one
// create of it, no second one); killed while Retiring, the next leader keeps the retiring
// instance serving its held lease. At the end there is exactly one forward-proxy process,
// the status's instance, and one instance directory: no duplicate, no leak, no record lost.
func TestClusterRolloutTakeover(t *testing.T) {
	c := startCluster(t, clusterOptions{net: 47, leaderTTL: "5s"})
	js := c.jetStream(c.connect("admin"))
	locks := mustKV(t, js, events.BucketLocks)
	crawler := &node{t: t, dir: c.dir, url: c.urls, env: c.userEnv("crawler")}
	surging := make(chan events.ProxyStatus, 1)
	var once sync.Once
	followBucket(t, js, events.BucketStatus, func(e jetstream.KeyValueEntry) {
		var st events.ProxyStatus
		if e.Key() == "solo" && json.Unmarshal(e.Value(), &st) == nil && st.Successor != nil {
			once.Do(func() { surging <- st })
		}
	})

	c.admin.nats("kv", "put", "cloud_init", "solo", "#cloud-config\n# v1\n")
	c.admin.nats("kv", "put", "proxies", "solo", soloSpec)
	rows := c.admin.waitRows("solo Ready", 2*time.Minute, readyOrFail(t, "solo", nil))
	first := rows["solo"].Status
	// The crawler user answers only on its own inbox prefix (deploy/nats).
	raw := crawler.nats("--inbox-prefix", "_INBOX_crawler", "req", "--raw", "--timeout", "5s", events.LeaseAcquireSubject,
		`{"selector":{"roll":"solo"},"ttlSeconds":300,"holder":"e2e"}`)
	var r events.LeaseReply
	if json.Unmarshal([]byte(strings.TrimSpace(raw)), &r); r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	held := r.Lease
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()

	// Surging: kill the leader as soon as the status records the successor.
	leader := c.reconcilerLeader(locks, nil)
	c.admin.nats("kv", "put", "cloud_init", "solo", "#cloud-config\n# v2\n")
	var seen events.ProxyStatus
	select {
	case seen = <-surging:
	case <-time.After(2 * time.Minute):
		t.Fatal("the status never recorded a successor")
	}
	leader.kill9()
	if st, _ := statusOf(t, js, "solo"); st.Successor == nil || st.InstanceName != first.InstanceName {
		t.Fatalf("the leader was not killed while Surging: %+v", st)
	}
	standby := c.reconcilerLeader(locks, leader)
	t.Logf("killed reconciler %d while Surging (successor %s); %d leads", leader.cmd.Process.Pid, seen.Successor.Name, standby.cmd.Process.Pid)
	leader.start()

	var switched events.ProxyStatus
	waitUntil(t, "the new leader switched to the recorded successor", 2*time.Minute, func() (bool, string) {
		switched, _ = statusOf(t, js, "solo")
		return retiringOn(switched, first.InstanceName), fmt.Sprintf("%s %+v", switched.Phase, switched.Rollout)
	})
	if switched.InstanceName != seen.Successor.Name {
		t.Fatalf("the status switched to %s, not to the successor recorded before the kill, %s", switched.InstanceName, seen.Successor.Name)
	}

	// Retiring: kill the leader again; the retiring instance keeps serving the held lease.
	leader = c.reconcilerLeader(locks, nil)
	leader.kill9()
	standby = c.reconcilerLeader(locks, leader)
	t.Logf("killed reconciler %d while Retiring; %d leads", leader.cmd.Process.Pid, standby.cmd.Process.Pid)
	leader.start()
	waitUntil(t, "the new leader counted the held lease on the retiring instance", 2*time.Minute, func() (bool, string) {
		st, _ := statusOf(t, js, "solo")
		return retiringOn(st, first.InstanceName) && strings.Contains(st.Message, "(1 leases run on)"), st.Message
	})
	if code := curlVia(t, held.URL, srv.URL); code != "200" {
		t.Fatalf("the held lease through the retiring instance after the takeover: HTTP %s", code)
	}

	crawler.nats("--inbox-prefix", "_INBOX_crawler", "req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, held.ID))
	var final events.ProxyStatus
	waitUntil(t, "the retiring instance deleted and solo Ready on its successor", 2*time.Minute, func() (bool, string) {
		final, _ = statusOf(t, js, "solo")
		return final.Phase == events.PhaseReady && final.Rollout == nil && len(final.Retiring) == 0 && final.Successor == nil,
			fmt.Sprintf("%s %+v retiring %d", final.Phase, final.Rollout, len(final.Retiring))
	})
	procs := proxyProcsByInstance(t, c.dir)
	if len(procs) != 1 || procs[final.InstanceName] != 1 {
		t.Errorf("forward proxies by instance %v, want one, of %s", procs, final.InstanceName)
	}
	if n := instanceDirs(t, c.dataDir()); n != 1 {
		t.Errorf("%d instance directories, want 1", n)
	}
	creates := map[string]bool{}
	for _, res := range opResults(t, js) {
		if res.Proxy == "solo" && res.Kind == events.OpCreate && res.Final {
			creates[res.OpID] = true
		}
	}
	if len(creates) != 2 {
		t.Errorf("%d create ops ran for solo, want 2 (its first instance and one successor)", len(creates))
	}
	for _, ev := range readEvents(t, js, events.EventSubject(events.KindLease, "solo")) {
		if ev.Reason == events.ReasonProxyReplaced || ev.Reason == events.ReasonProxyDeleted {
			t.Errorf("a lease was ended by the rollout: %+v", ev)
		}
	}
}
