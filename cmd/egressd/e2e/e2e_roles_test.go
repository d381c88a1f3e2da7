package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// startRole starts `egressd run` for some roles against an existing NATS server.
func startRole(t *testing.T, dir, url string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(egressdBin, append([]string{"run", "--nats-url", url, "--metrics-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}, args...)...)
	cmd.Dir = dir
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%v log:\n%s", args, log.String())
		}
	})
	return cmd
}

// waitLeaseService waits until want replicas of the lease service answer its discovery
// ping: a role process is started, not serving, when startRole returns, and a request sent
// before any replica serves is answered "no responders".
func waitLeaseService(t testing.TB, nc *nats.Conn, want int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d lease service replicas serving", want), 60*time.Second, func() (bool, string) {
		ids := map[string]bool{}
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		subject, err := micro.ControlSubject(micro.PingVerb, events.LeaseService, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := sub.NextMsg(500 * time.Millisecond)
			if err != nil {
				break
			}
			var ping micro.Ping
			if json.Unmarshal(m.Data, &ping) == nil && ping.ID != "" {
				ids[ping.ID] = true
			}
		}
		return len(ids) >= want, fmt.Sprint(len(ids), " answered")
	})
}

// The roles scale out as separate processes on one NATS: `egressd setup` declares, the
// others only bind; a proxy converges, is probed Ready and is leased.
func TestRolesAsSeparateProcesses(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 25)
	n := startNode(t, dir, "--config", cfg, "--roles", "reconciler")
	// Three lease shards (the node's own start declared one): no role that leases has
	// started yet, and none holds a slot.
	out, err := exec.CommandContext(context.Background(), egressdBin, "setup", "--nats-url", n.url, "--config", cfg,
		"--data-dir", filepath.Join(dir, "data"), "--lease-shards", "3").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OPS_local") || !strings.Contains(string(out), "lease shards: 3: proxy_leases, proxy_leases_1, proxy_leases_2\n") {
		t.Fatalf("egressd setup: %v\n%s", err, out)
	}
	startRole(t, dir, n.url, "--config", cfg, "--roles", "provisioner")
	startRole(t, dir, n.url, "--roles", "prober,leaser")
	startRole(t, dir, n.url, "--roles", "leaser")
	n.nats("kv", "put", "proxies", "px", `{"provider":"local","healthCheck":{"intervalSeconds":1}}`)
	n.waitRows("px Ready", 30*time.Second, allPhase([]string{"px"}, events.PhaseReady))
	if r, raw := n.acquire(`{"ttlSeconds":30}`); r.Lease.Proxy != "px" {
		t.Fatalf("acquire: %s", raw)
	}
	n.nats("kv", "del", "-f", "proxies", "px")
	n.waitRows("px gone", 30*time.Second, func(r map[string]fleet.Row) bool { return len(r) == 0 })
}
