package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// Spares with real processes: an autoscaled pool at zero members with `spares: 1` and
// targetUtilization 1. One crawler's acquire that waits scales it to the member that serves it
// plus one idle Ready spare; the lease works through curl; the ScaledUp event and `egressd
// status pools` carry the spare as an input, and the pool's status has the members' boot
// times.
func TestPoolKeepsSpares(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeLocalProviders(t, dir, "local", "127.0.50.100-127.0.50.250")
	n := startNode(t, dir, "--config", cfg)
	w := watchPool(t, n, "warm")
	n.nats("kv", "put", "pools", "warm", `{"template":{"provider":"local","maxLeases":1,`+poolHealth+`},`+
		`"autoscale":{"min":0,"max":4,"targetUtilization":1,"scaleDownAfterSeconds":600,"spares":1}}`)
	waitUntil(t, "the idle pool at zero members", 30*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "warm: autoscale 0 to 4, wants 0"), out
	})

	out := n.nats("req", "--raw", "--timeout", "60s", events.LeaseAcquireSubject,
		`{"selector":{"pool":"warm"},"ttlSeconds":120,"holder":"crawler","waitSeconds":45}`)
	var r events.LeaseReply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || r.Lease.ID == "" {
		t.Fatalf("a waiting acquire on the empty pool: %s", out)
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	if code := curlVia(t, r.Lease.URL, web.URL); code != "200" {
		t.Fatalf("curl through the lease: HTTP %s", code)
	}
	n.waitRows("the leased member and one idle Ready spare", 90*time.Second, poolReady("warm", 2, nil))
	waitUntil(t, "the spare in the pool's status", 30*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "; spares 1: 1 (fixed: 1)") && strings.Contains(out, "warm: boot p50 "), out
	})
	evs := n.egressd("events", "--kind", "pool", "-f=false")
	if !strings.Contains(evs, string(events.ReasonScaledUp)) || !strings.Contains(evs, "1 spares (fixed: 1)") {
		t.Fatalf("no ScaledUp event with the spare among its inputs:\n%s", evs)
	}
	// Held a while, the pool stays at the leased member plus its spare.
	rows := n.rows()
	idle := 0
	for _, m := range members(rows, "warm") {
		if m.Leases == 0 && m.Phase == events.PhaseReady {
			idle++
		}
	}
	if idle != 1 {
		t.Fatalf("%d idle Ready members, want the one spare: %+v", idle, members(rows, "warm"))
	}
	if highest, _ := w.stats(); highest > 4 {
		t.Fatalf("the pool had %d members at one point; max is 4", highest)
	}
}
