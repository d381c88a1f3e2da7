package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// The policy side of the anonymity probe, with real Squids and the real binary:
//   - requireAnonymity elite on a stock Squid: Unhealthy with HeaderLeak naming
//     X-Forwarded-For, never leased; the Squid fixed (same port, same spec): Ready again;
//   - an acquire with minAnonymity elite skips an anonymous Squid, and the 503 says so;
//   - an external proxy whose expectedEgress is not what the echo endpoint sees is
//     EgressMismatch (and still Ready); a local proxy with bindSource leaves from its own
//     address, as its status expects.
func TestAnonymityPolicyEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	stock, reconfigure := startSquid(t, dir, false)
	anon, _ := startSquidLines(t, dir, func(bool) string { return squidAnonymousLines }, false)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 31))
	hc := func(require string) string {
		return fmt.Sprintf(`"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1,"requireAnonymity":%q}`, require)
	}
	n.nats("kv", "put", "proxies", "sq", fmt.Sprintf(`{"mode":"external","endpoint":{"host":"127.0.0.1","port":%d,"expectedEgress":"127.0.0.9"},"attributes":{"tier":"x"},%s}`, stock, hc("elite")))
	n.nats("kv", "put", "proxies", "loc", `{"provider":"local","attributes":{"tier":"x"},`+hc("elite")+`}`)
	n.nats("kv", "put", "proxies", "anon", fmt.Sprintf(`{"mode":"external","endpoint":{"host":"127.0.0.1","port":%d},"attributes":{"tier":"y"},%s}`, anon, hc("none")))

	rows := n.waitRows("sq HeaderLeak, loc and anon Ready", 60*time.Second, func(r map[string]fleet.Row) bool {
		return r["sq"].Phase == events.PhaseUnhealthy && r["sq"].Reason == events.ReasonHeaderLeak &&
			r["loc"].Phase == events.PhaseReady && r["anon"].Phase == events.PhaseReady && r["anon"].Anonymity == events.AnonymityAnonymous
	})
	if !strings.Contains(rows["sq"].Message, "X-Forwarded-For") {
		t.Fatalf("the HeaderLeak message does not name the header: %q", rows["sq"].Message)
	}
	if out := n.egressd("status"); !strings.Contains(out, "ANONYMITY") || !strings.Contains(out, "transparent") {
		t.Fatalf("egressd status does not show the verdict:\n%s", out)
	}
	for range 3 {
		r, raw := n.acquire(`{"selector":{"tier":"x"},"ttlSeconds":5}`)
		if r.Lease.Proxy != "loc" {
			t.Fatalf("acquire on tier x: %s (the leaking squid must never be leased)", raw)
		}
		n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	}

	// minAnonymity: the anonymous squid is skipped, and the numbers say why.
	if _, raw := n.acquire(`{"selector":{"tier":"y"},"minAnonymity":"elite"}`); !strings.Contains(raw, `"belowAnonymity":1`) || !strings.Contains(raw, `"ready":1`) {
		t.Fatalf("acquire elite on an anonymous proxy: %s", raw)
	}
	if r, raw := n.acquire(`{"selector":{"tier":"y"},"minAnonymity":"anonymous","ttlSeconds":5}`); r.Lease.Proxy != "anon" {
		t.Fatalf("acquire anonymous: %s", raw)
	} else {
		n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	}

	// The stock squid fixed, with no spec change: Ready, with the egress warning.
	reconfigure(true)
	rows = n.waitRows("sq Ready once fixed, warned of its egress", 60*time.Second, func(r map[string]fleet.Row) bool {
		return r["sq"].Phase == events.PhaseReady && r["sq"].Anonymity == events.AnonymityElite && r["sq"].Reason == events.ReasonEgressMismatch
	})
	if !strings.Contains(rows["sq"].Message, "127.0.0.1") || !strings.Contains(rows["sq"].Message, "127.0.0.9") || !rows["sq"].EgressMismatch {
		t.Fatalf("the EgressMismatch row: %+v", rows["sq"])
	}
	if r, raw := n.acquire(`{"selector":{"tier":"x"},"minAnonymity":"elite","ttlSeconds":5}`); r.Lease.ID == "" {
		t.Fatalf("acquire elite once fixed: %s", raw)
	}

	// The local proxy leaves from its own address (bindSource), which its status expects.
	ip, _, _ := strings.Cut(rows["loc"].Address, ":")
	h := n.waitHealth("loc", "loc's egress checked", 30*time.Second, func(h events.ProxyHealth) bool { return h.ExpectedEgress != "" })
	if h.EgressIP != ip || h.ExpectedEgress != ip || rows["loc"].EgressMismatch || rows["loc"].Reason == events.ReasonEgressMismatch {
		t.Fatalf("local proxy at %s: egress %s, expected %s, row %+v", ip, h.EgressIP, h.ExpectedEgress, rows["loc"])
	}
}
