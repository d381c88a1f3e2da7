package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
)

// Blocks in a row on one (proxy, target) cool the proxy down base, base×f, base×f², up to the
// cap; a success there takes one block off; another target starts at base; replicas share the
// count (each block is counted compare-and-set in KV, whichever replica takes it).
func TestEscalatingCooldowns(t *testing.T) {
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) { escalatingCooldowns(t, replicas) })
	}
}

func escalatingCooldowns(t *testing.T, replicas int) {
	esc := leaser.Escalation{Factor: 2, Cap: 35 * time.Second}
	r := newRig(t, func(c *leaser.Config) { c.Escalation = esc })
	r.seed(proxy{name: "px-a", maxLeases: 5})
	r.startLeasers(replicas)
	l := r.mustAcquire(events.AcquireRequest{Holder: "c1", TTLSeconds: 300})

	step := func(target string, result events.ReportResult, wantStrikes int, want time.Duration) {
		t.Helper()
		req := events.ReportRequest{ID: l.ID, Result: result, Target: target}
		if result == events.ReportBlocked {
			req.CooldownSeconds = 5
		}
		before := time.Now()
		rr := r.report(req)
		after := time.Now()
		if rr.Strikes != wantStrikes {
			t.Fatalf("%s on %s: strikes %d, want %d", result, target, rr.Strikes, wantStrikes)
		}
		if result != events.ReportBlocked {
			return
		}
		// The leaser's clock stamps the cooldown between the two readings of ours.
		if lo, hi := before.Add(want-time.Second), after.Add(want+time.Second); rr.CooldownUntil.Before(lo) || rr.CooldownUntil.After(hi) {
			t.Fatalf("block %d on %s: cooldown until %v, want %v from now", wantStrikes, target, rr.CooldownUntil.Sub(before).Round(time.Second), want)
		}
	}
	step("a.example", events.ReportBlocked, 1, 5*time.Second)
	step("a.example", events.ReportBlocked, 2, 10*time.Second)
	step("a.example", events.ReportBlocked, 3, 20*time.Second)
	step("a.example", events.ReportBlocked, 4, 35*time.Second) // 40s, capped
	step("b.example", events.ReportBlocked, 1, 5*time.Second)  // another target starts afresh
	if replicas > 1 {
		return // a success on a replica whose watch has not yet brought the strike skips it
	}
	// A success takes one block off.
	step("a.example", events.ReportOK, 0, 0)
	step("a.example", events.ReportBlocked, 4, 35*time.Second) // 4 → 3 → 4
	step("a.example", events.ReportOK, 0, 0)
	step("a.example", events.ReportOK, 0, 0)
	step("a.example", events.ReportBlocked, 3, 20*time.Second) // 4 → 2 → 3

	// The status and the page read the cooldown's strikes (readside/fleet.Cooldowns).
	found := false
	for _, c := range r.cooldownRecords() {
		if c.Target == "a.example" {
			found = c.Strikes == 3
		}
	}
	if !found {
		t.Fatalf("the a.example cooldown record does not say 3 strikes: %+v", r.cooldownRecords())
	}
}

// Without escalation every block on a target gets the same cooldown and no strike count.
func TestCooldownsWithoutEscalation(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 5})
	r.startLeasers(1)
	l := r.mustAcquire(events.AcquireRequest{Holder: "c1", TTLSeconds: 300})
	for i := range 3 {
		before := time.Now()
		rr := r.report(events.ReportRequest{ID: l.ID, Result: events.ReportBlocked, Target: "a.example", CooldownSeconds: 5})
		if rr.Strikes != 0 || rr.CooldownUntil.After(time.Now().Add(6*time.Second)) || rr.CooldownUntil.Before(before.Add(4*time.Second)) {
			t.Fatalf("block %d: %+v", i+1, rr)
		}
	}
	if n := r.coolKeys(); n != 1 {
		t.Fatalf("%d keys in proxy_cooldowns, want the one cooldown (no strike record)", n)
	}
}

func (r *rig) coolKeys() int { return r.keys(r.store.Cooldowns) }

// cooldownRecords decodes every cooldown record (strike records decode with no Until).
func (r *rig) cooldownRecords() []events.Cooldown {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := r.store.Cooldowns.ListKeys(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []events.Cooldown
	for k := range keys.Keys() {
		e, err := r.store.Cooldowns.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var c events.Cooldown
		if json.Unmarshal(e.Value(), &c) == nil && !c.Until.IsZero() {
			out = append(out, c)
		}
	}
	return out
}
