package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// A burned local member's replacement never gets the burned address while it is in
// quarantine (issue 27, decision 96). The local provider hands out the lowest free address,
// so without quarantine the second burn's replacement would get the first burned member's
// address back: it is the lowest, and free once that member is gone. With three addresses
// and one member: A on .2 burned, B gets .3 (A still holds .2); B burned, C must get .4, not
// .2. The quarantine lasts a day, so the test does not depend on the clock; `egressd status
// quarantine` shows both burned addresses, and the events say why.
func TestBurnedAddressStaysQuarantined(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	const net97 = "127.0.97."
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    local:\n      addresses: [127.0.97.2-127.0.97.4]\n      bindSource: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "--config", cfg)
	n.nats("kv", "put", "pools", "web", `{"template":{"provider":"local",`+poolHealth+`},"replicas":1,`+
		`"recycle":{"blockedTargets":1,"windowSeconds":600}}`)
	rows := n.waitRows("one Ready member", 60*time.Second, poolReady("web", 1, nil))
	first := members(rows, "web")[0]
	if host(first.Address) != net97+"2" {
		t.Fatalf("the first member is on %s, want the lowest address %s2", first.Address, net97)
	}
	b := burn(t, n, first.Name)
	if host(b.Address) == net97+"2" {
		t.Fatalf("the burned member's successor got its address %s", b.Address)
	}
	c := burn(t, n, b.Name)
	if a := host(c.Address); a == net97+"2" || a == host(b.Address) {
		t.Fatalf("the second burn's replacement got the burned address %s (burned: %s2 and %s)", a, net97, host(b.Address))
	}

	var q []events.Quarantine
	if err := json.Unmarshal([]byte(n.egressd("status", "quarantine", "-o", "json")), &q); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range q {
		got[r.Address] = r.Proxy
		if r.Prefix != r.Address+"/32" || r.Pool != "web" || r.Until.Sub(r.At) != 24*time.Hour {
			t.Errorf("quarantine record %+v", r)
		}
	}
	if got[net97+"2"] != first.Name || got[host(b.Address)] != b.Name {
		t.Errorf("status quarantine %v, want %s2 for %s and %s for %s", got, net97, first.Name, host(b.Address), b.Name)
	}
	if out := n.egressd("status", "quarantine"); !strings.Contains(out, net97+"2/32") || !strings.Contains(out, "UNTIL") {
		t.Errorf("status quarantine table:\n%s", out)
	}
	if out := n.egressd("events", "--kind", "pool", "-f=false"); !strings.Contains(out, string(events.ReasonAddressQuarantined)) {
		t.Errorf("pool events lack AddressQuarantined:\n%s", out)
	}
}

// burn leases the pool's member, reports it blocked until it is recycled, and returns its
// successor once that is the pool's only member, Ready.
func burn(t *testing.T, n *node, member string) fleet.Row {
	t.Helper()
	r, raw := n.acquire(`{"selector":{"pool":"web"},"ttlSeconds":60,"holder":"e2e"}`)
	if r.Lease.Proxy != member {
		t.Fatalf("acquire got %q, want %s: %s", r.Lease.Proxy, member, raw)
	}
	out := n.nats("req", "--raw", events.LeaseReportSubject, fmt.Sprintf(`{"id":%q,"result":"blocked","target":"shop.example","cooldownSeconds":1}`, r.Lease.ID))
	if !strings.Contains(out, "cooldownUntil") {
		t.Fatalf("report: %s", out)
	}
	n.waitRows("the burned member draining", 30*time.Second, func(rows map[string]fleet.Row) bool {
		return rows[member].Phase == events.PhaseDraining
	})
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	rows := n.waitRows("the burned member replaced", 60*time.Second, func(rows map[string]fleet.Row) bool {
		_, ok := rows[member]
		return !ok && poolReady("web", 1, nil)(rows)
	})
	return members(rows, "web")[0]
}

func host(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
