package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// A pool with autoscale {min: 0, max: 3} on the local provider, with real processes: idle, it
// has no member; acquires refused for want of one scale it up (five crawlers want more than
// max, and it never has more than 3 members at any observation), an acquire retried then gets
// a lease that curl works through; once the demand is gone for scaleDownAfterSeconds it
// drains back to zero members and no forward-proxy process is left. The decisions are pool
// events with their inputs, and the pool's status shows them.
func TestPoolAutoscaleFromZero(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 173)
	// A short demand window: refusals stop counting 5 s after the last one.
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("leases:\n  demandWindow: 5s\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	n := startNode(t, dir, "--config", cfg)
	w := watchPool(t, n, "auto")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()

	n.nats("kv", "put", "pools", "auto", `{"template":{"provider":"local",`+poolHealth+`},`+
		`"autoscale":{"min":0,"max":3,"scaleDownAfterSeconds":5,"targetUtilization":1}}`)
	waitUntil(t, "the idle pool recorded at zero members", 30*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "auto: autoscale 0 to 3, wants 0"), out
	})
	if len(members(n.rows(), "auto")) != 0 || len(proxyProcs(t, dir)) != 0 {
		t.Fatal("an idle pool with min 0 has members")
	}

	// Five crawlers want a proxy: the pool grows, to max and no further. The first is refused,
	// for nothing can serve it yet; the pool starts booting at once, so on a slow machine a
	// later one may find a Ready member and get a lease. It keeps it: each crawler either
	// holds a lease or was refused, so the demand is five either way.
	var held []string
	for i := range 5 {
		r, raw := n.acquire(fmt.Sprintf(`{"selector":{"pool":"auto"},"ttlSeconds":60,"holder":"crawler-%d"}`, i))
		switch {
		case i > 0 && r.Lease.ID != "":
			held = append(held, r.Lease.ID)
		case r.Lease.ID != "" || !strings.Contains(raw, "no proxy available"):
			t.Fatalf("acquire %d on an empty pool: %s", i, raw)
		}
	}
	t.Logf("%d of the four crawlers after the first got a lease", len(held))
	n.waitRows("3 Ready members", 90*time.Second, poolReady("auto", 3, nil))
	// The crawlers that got a lease early are done with it: the refused one's retry below, and
	// the scale-down to its member, must not depend on which crawler came first.
	for _, id := range held {
		n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, id))
	}
	r, raw := n.acquire(`{"selector":{"pool":"auto"},"ttlSeconds":60,"holder":"crawler-0"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire retried once members are Ready: %s", raw)
	}
	if code := curlVia(t, r.Lease.URL, web.URL); code != "200" {
		t.Fatalf("curl through the lease on %s: HTTP %s", r.Lease.Proxy, code)
	}
	evs := n.egressd("events", "--kind", "pool", "-f=false")
	if !strings.Contains(evs, string(events.ReasonScaledUp)) || !strings.Contains(evs, "refused") || !strings.Contains(evs, "→ 3") {
		t.Fatalf("no ScaledUp event to 3 with its inputs:\n%s", evs)
	}

	// The refusals fade: the pool drains its idle members down to the leased one, which stays
	// Ready and keeps working; once released, it goes too.
	n.waitRows("down to the leased member", 90*time.Second, func(rows map[string]fleet.Row) bool {
		ms := members(rows, "auto")
		return len(ms) == 1 && ms[0].Name == r.Lease.Proxy && ms[0].Phase == events.PhaseReady
	})
	if code := curlVia(t, r.Lease.URL, web.URL); code != "200" {
		t.Fatalf("curl through the lease after the scale-down: HTTP %s", code)
	}
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	n.waitRows("no member left after scaleDownAfterSeconds without demand", 90*time.Second, func(rows map[string]fleet.Row) bool {
		return len(members(rows, "auto")) == 0
	})
	waitUntil(t, "no forward-proxy process left", 30*time.Second, func() (bool, string) {
		p := proxyProcs(t, dir)
		return len(p) == 0, fmt.Sprint(p)
	})
	evs = n.egressd("events", "--kind", "pool", "-f=false")
	if !strings.Contains(evs, string(events.ReasonScaledDown)) || !strings.Contains(evs, "1 → 0") {
		t.Fatalf("no ScaledDown event to 0:\n%s", evs)
	}
	if out := n.egressd("status", "pools"); !strings.Contains(out, "auto: autoscale 0 to 3, wants 0") || !strings.Contains(out, "last 1 → 0") {
		t.Fatalf("status after scaling to zero:\n%s", out)
	}
	if highest, _ := w.stats(); highest > 3 {
		t.Fatalf("the pool had %d members at one point; autoscale max is 3", highest)
	}
}
