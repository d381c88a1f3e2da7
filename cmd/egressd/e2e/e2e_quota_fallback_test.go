package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// Quota on the first placement sends new members to the second; the pool says so. With real
// processes: two local providers, "tight" with one address (its second instance answers
// Quota: address pool exhausted) and "roomy"; a pool of 3 over [tight, roomy] round-robin
// asks tight for two. The member that got Quota is replaced at roomy, successor first, so the
// pool ends with 1 member on tight and 2 on roomy, all Ready and leasable; the pool's status
// names the held placement and its reason and counts members per placement; a
// PlacementFallback event says where and why; the pool never has more than replicas +
// maxSurge members; and each member's boot is in egress_proxy_boot_seconds.
func TestPoolQuotaFallback(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeLocalProviders(t, dir, "tight", "127.0.50.2-127.0.50.2", "roomy", "127.0.50.10-127.0.50.99")
	n := startNode(t, dir, "--config", cfg)
	w := watchPool(t, n, "spill")
	n.nats("kv", "put", "pools", "spill", `{"template":{"provider":"tight",`+poolHealth+`},"replicas":3,`+
		`"placements":[{"provider":"tight"},{"provider":"roomy"}]}`)

	n.waitRows("3 Ready members, 1 on tight and 2 on roomy", 120*time.Second, func(rows map[string]fleet.Row) bool {
		ms := members(rows, "spill")
		per := map[string]int{}
		for _, m := range ms {
			if m.Phase != events.PhaseReady {
				return false
			}
			per[m.Provider]++
		}
		return len(ms) == 3 && per["tight"] == 1 && per["roomy"] == 2
	})
	waitUntil(t, "the pool's status to say where and why", 30*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "spill: 3 of 3 members Ready; placement 0 (tight) is held (QuotaExceeded)") &&
			strings.Contains(out, "new members go to placement 1 (roomy)") &&
			strings.Contains(out, "spill: placements 0 tight: 1 (1 Ready), held QuotaExceeded (") &&
			strings.Contains(out, "1 roomy: 2 (2 Ready)"), out
	})
	evs := n.egressd("events", "--kind", "pool", "-f=false")
	for _, want := range []string{string(events.ReasonPlacementFallback), "placement 0 (tight) answered QuotaExceeded", "new members go to placement 1 (roomy)"} {
		if !strings.Contains(evs, want) {
			t.Fatalf("pool events lack %q:\n%s", want, evs)
		}
	}
	if highest, _ := w.stats(); highest > 4 {
		t.Fatalf("the pool had %d members at one point; replicas 3 + maxSurge 1 is the cap", highest)
	}
	// The members work: a lease on one at roomy passes traffic.
	r, raw := n.acquire(`{"selector":{"pool":"spill"},"ttlSeconds":30,"holder":"crawler"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire on the pool: %s", raw)
	}
	// Boot times: in the pool's record, and in the histogram per provider.
	waitUntil(t, "boot times in the pool's status", 30*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "spill: boot p50 "), out
	})
	m := metricsURLPattern.FindStringSubmatch(n.logs())
	if m == nil {
		t.Fatal("no metrics address in the log")
	}
	waitUntil(t, "boots in egress_proxy_boot_seconds", 30*time.Second, func() (bool, string) {
		body := httpGet(t, m[1]+"/metrics")
		return strings.Contains(body, `egress_proxy_boot_seconds_count{image="",provider="roomy",zone="`) &&
			strings.Contains(body, `egress_proxy_boot_seconds_count{image="",provider="tight",zone="`), grepLines(body, "egress_proxy_boot")
	})
}

// writeLocalProviders writes a config of local providers, given as name, address range pairs.
func writeLocalProviders(t *testing.T, dir string, nameRange ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:\n")
	for i := 0; i+1 < len(nameRange); i += 2 {
		fmt.Fprintf(&b, "  - name: %s\n    type: local\n    local:\n      addresses: [%s]\n      bindSource: true\n", nameRange[i], nameRange[i+1])
	}
	p := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(out)
}
