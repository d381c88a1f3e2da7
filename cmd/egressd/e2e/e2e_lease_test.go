package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// acquire asks for a lease with the real nats CLI, as a shell-script crawler would.
func (n *node) acquire(req string) (events.LeaseReply, string) {
	n.t.Helper()
	out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseAcquireSubject, req)
	var r events.LeaseReply
	_ = json.Unmarshal([]byte(strings.TrimSpace(out)), &r)
	return r, out
}

func curlVia(t *testing.T, proxyURL, target string) string {
	t.Helper()
	out, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x", proxyURL, target).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("curl -x %s %s: %v", proxyURL, target, err)
	}
	return string(out)
}

// The crawler's side of the quickstart, with the real nats CLI and curl: a lease's URL works
// with curl -x and a wrong password is refused; a killed proxy turns Unhealthy, is not
// leased, and comes back; leases survive a restart of the whole of egressd.
func TestLeasesEndToEnd(t *testing.T) {
	needNats(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (.ci/run installs it)")
	}
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 24))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1}`
	n.nats("kv", "put", "proxies", "de-1", `{"provider":"local","attributes":{"geo":"de"},"auth":{"username":"crawler","password":"pa:ss@1"},`+hc+`}`)
	n.nats("kv", "put", "proxies", "fr-1", `{"provider":"local","attributes":{"geo":"fr"},`+hc+`}`)
	rows := n.waitRows("both Ready", 30*time.Second, allPhase([]string{"de-1", "fr-1"}, events.PhaseReady))

	r, raw := n.acquire(`{"selector":{"geo":"de"},"target":"example.com","ttlSeconds":60,"holder":"e2e"}`)
	if r.Lease.Proxy != "de-1" || !strings.Contains(r.Lease.URL, "@"+rows["de-1"].Address) {
		t.Fatalf("acquire: %s", raw)
	}
	if code := curlVia(t, r.Lease.URL, web.URL); code != "200" {
		t.Fatalf("curl -x with the leased URL: HTTP %s", code)
	}
	wrong := strings.Replace(r.Lease.URL, "pa%3Ass%401", "wrong", 1)
	if wrong == r.Lease.URL {
		t.Fatalf("could not find the escaped password in %s", r.Lease.URL)
	}
	if code := curlVia(t, wrong, web.URL); code != "407" {
		t.Fatalf("a wrong password got HTTP %s, want 407", code)
	}
	if _, raw := n.acquire(`{"selector":{"geo":"de"}}`); !strings.Contains(raw, `"atCapacity":1`) {
		t.Fatalf("second acquire on a maxLeases 1 proxy: %s", raw)
	}
	if _, raw := n.acquire(`{"selector":{"geo":"de"},"ttlSeconds":"x"}`); !strings.Contains(raw, "ttlSeconds") {
		t.Fatalf("a bad request is not explained: %s", raw)
	}

	t.Run("a killed proxy is Unhealthy, not leased, then back", func(t *testing.T) {
		var pid int
		for _, p := range proxyProcs(t, dir) {
			cmdline, _ := exec.Command("cat", fmt.Sprintf("/proc/%d/cmdline", p)).Output()
			if strings.Contains(string(cmdline), rows["fr-1"].Address) {
				pid = p
			}
		}
		if pid == 0 {
			t.Fatal("fr-1's process not found")
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		n.waitRows("fr-1 Unhealthy", 30*time.Second, func(r map[string]fleet.Row) bool { return r["fr-1"].Phase == events.PhaseUnhealthy })
		if _, raw := n.acquire(`{"selector":{"geo":"fr"}}`); !strings.Contains(raw, `"ready":0`) {
			t.Fatalf("an Unhealthy proxy was offered: %s", raw)
		}
		n.waitRows("fr-1 Ready again", time.Minute, func(r map[string]fleet.Row) bool { return r["fr-1"].Phase == events.PhaseReady })
		if r, raw := n.acquire(`{"selector":{"geo":"fr"},"ttlSeconds":30}`); r.Lease.Proxy != "fr-1" {
			t.Fatalf("the recovered proxy is not leased: %s", raw)
		}
	})

	t.Run("leases survive a restart of egressd", func(t *testing.T) {
		if code := n.stop(); code != 0 {
			t.Fatalf("egressd exited %d", code)
		}
		n.start()
		n.waitRows("de-1 Ready after restart", 30*time.Second, allPhase([]string{"de-1"}, events.PhaseReady))
		if rows := n.rows(); rows["de-1"].Leases != 1 {
			t.Fatalf("de-1 shows %d leases after restart", rows["de-1"].Leases)
		}
		out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseRenewSubject, fmt.Sprintf(`{"id":%q,"ttlSeconds":60}`, r.Lease.ID))
		if !strings.Contains(out, r.Lease.ID) {
			t.Fatalf("renew after restart: %s", out)
		}
		out = n.nats("req", "--raw", "--timeout", "5s", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
		if !strings.Contains(out, `"released":true`) {
			t.Fatalf("release after restart: %s", out)
		}
	})

	t.Run("a new password reaches the running proxy without replacing it", func(t *testing.T) {
		before := n.rows()["de-1"]
		n.nats("kv", "put", "proxies", "de-1", `{"provider":"local","attributes":{"geo":"de"},"auth":{"username":"crawler","password":"n3w"},`+hc+`}`)
		waitUntil(t, "the new password to be accepted", 30*time.Second, func() (bool, string) {
			code := curlVia(t, "http://crawler:n3w@"+before.Address, web.URL)
			return code == "200", "HTTP " + code
		})
		if code := curlVia(t, r.Lease.URL, web.URL); code != "407" {
			t.Fatalf("the old password still works: HTTP %s", code)
		}
		if after := n.rows()["de-1"]; after.Address != before.Address || after.Status.InstanceID != before.Status.InstanceID {
			t.Fatalf("a password change replaced the instance: %+v → %+v", before.Status, after.Status)
		}
	})
}
