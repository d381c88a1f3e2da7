package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
	"github.com/egressd/egressd/readside/fleet"
)

// rolloutVMPort is the port the proxmox simulator's VMs of this test serve on, at
// 127.0.54.100–140 (the rollout tests' net).
const rolloutVMPort = 18154

func pwSpec(password string) string {
	b, _ := json.Marshal(map[string]any{
		"provider":   "pve",
		"placement":  map[string]string{"zone": proxmoxNode, "machineType": "small", "image": "debian"},
		"port":       rolloutVMPort,
		"attributes": map[string]string{"e2e": "pw"},
		"auth":       map[string]string{"username": proxmoxUser, "password": password},
		"healthCheck": map[string]int{
			"intervalSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 2, "successThreshold": 1,
		},
	})
	return string(b)
}

// A proxmox proxy whose password changes: the VM cannot take new credentials in place, so
// the change rolls a new VM. Crawlers leasing all through the change get credentials that
// work (every granted lease's request succeeds: before the change the old VM's, after it
// the new VM's), and the proxy ends Ready on a new VM that takes the new password only. No
// password reaches a status, an event or a log line.
func TestVMPasswordChangeRollsANewInstance(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	sim, cfg := proxmoxSim(t, dir, 54, 100, 140, pvetest.Timing{Clone: time.Second, Boot: 500 * time.Millisecond})
	webURL := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })) + "/"

	const oldPass, newPass = "sentinel-old-Pw-7f3a", "sentinel-new-Pw-91c2"
	n := startNode(t, dir, "--config", cfg)
	n.nats("kv", "put", "proxies", "pw-1", pwSpec(oldPass))
	rows := n.waitRows("pw-1 Ready", 2*time.Minute, readyOrFail(t, "pw-1", nil))
	firstVM := rows["pw-1"].Status.InstanceID
	firstGen := rows["pw-1"].Status.Generation

	nc, _ := n.client()
	stop := make(chan struct{})
	var mu sync.Mutex
	var granted, before int
	var failures []string
	changed := false
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			msg, err := nc.Request(events.LeaseAcquireSubject, []byte(`{"selector":{"e2e":"pw"},"ttlSeconds":30,"holder":"pw-crawler"}`), 5*time.Second)
			var r events.LeaseReply
			if err != nil || json.Unmarshal(msg.Data, &r) != nil || r.Lease.ID == "" {
				time.Sleep(100 * time.Millisecond) // refused: nothing free right now
				continue
			}
			out, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x", r.Lease.URL, webURL).Output()
			mu.Lock()
			granted++
			if !changed {
				before++
			}
			if string(out) != "200" {
				u, _ := url.Parse(r.Lease.URL)
				failures = append(failures, fmt.Sprintf("lease %s on %s: HTTP %s", r.Lease.ID, u.Host, out))
			}
			mu.Unlock()
			_, _ = nc.Request(events.LeaseReleaseSubject, []byte(fmt.Sprintf(`{"id":%q}`, r.Lease.ID)), 5*time.Second)
		}
	})
	waitUntil(t, "the crawler served before the change", time.Minute, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return granted >= 3, fmt.Sprintf("%d granted", granted)
	})

	mu.Lock()
	changed = true
	mu.Unlock()
	n.nats("kv", "put", "proxies", "pw-1", pwSpec(newPass))
	rows = n.waitRows("pw-1 Ready on a new VM", 3*time.Minute, readyOrFail(t, "pw-1", func(r fleet.Row) bool {
		return r.Status.Generation != firstGen && r.Status.Rollout == nil
	}))
	mu.Lock()
	after := granted - before
	mu.Unlock()
	waitUntil(t, "the crawler served on the new VM", time.Minute, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return granted-before > after+2, fmt.Sprintf("%d granted after the change", granted-before)
	})
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d granted leases did not work:\n%s", len(failures), granted, strings.Join(failures, "\n"))
	}
	addr := rows["pw-1"].Address
	if code := curlVia(t, "http://"+proxmoxUser+":"+newPass+"@"+addr, webURL); code != "200" {
		t.Fatalf("the new VM refuses the new password: HTTP %s", code)
	}
	if code := curlVia(t, "http://"+proxmoxUser+":"+oldPass+"@"+addr, webURL); code != "407" {
		t.Fatalf("the new VM takes the old password: HTTP %s", code)
	}
	if vms := guestVMs(sim); len(vms) != 1 || rows["pw-1"].Status.InstanceID == firstVM && vms[0].Name == "" {
		t.Fatalf("VMs after the rollout: %+v", vms)
	}
	// Sentinels: neither password in a status, an event or a log line.
	status := n.nats("kv", "get", "--raw", "proxy_status", "pw-1")
	evs := n.egressd("events", "--proxy", "pw-1", "-f=false", "--since", "1h")
	for _, secret := range []string{oldPass, newPass} {
		for what, text := range map[string]string{"status": status, "events": evs, "log": n.logs()} {
			if strings.Contains(text, secret) {
				t.Fatalf("a password leaked into the %s", what)
			}
		}
	}
	if !strings.Contains(evs, string(events.ReasonCredentialsChanged)) || !strings.Contains(evs, string(events.ReasonRolloutReplaced)) {
		t.Fatalf("the events do not tell the rollout:\n%s", evs)
	}
}
