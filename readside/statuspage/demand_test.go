package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// /api/status.json carries each pool's demand (summed over the leasers) and, for an
// autoscaled pool, its bounds and the autoscaler's state, while the members' ledger stays out.
func TestStatusJSONPoolDemand(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.store.Pools.Put(ctx, "web", []byte(`{"template":{"provider":"local"},"autoscale":{"min":0,"max":3}}`)); err != nil {
		t.Fatal(err)
	}
	st := events.PoolStatus{V: 1, Phase: events.PoolProgressing, Replicas: 2, MaxMembers: 3, Members: []events.PoolMember{},
		Autoscale: &events.PoolAutoscale{Desired: 2, Inputs: events.ScaleInputs{Refused: 2, Target: 0.8, Wanted: 3},
			LastDecision: "0 → 2: 2 refused, 0/0 leased, target 0.8", LastDecisionAt: r.now}, UpdatedAt: r.now}
	if _, err := kvstore.PutJSON(ctx, r.store.PoolStatus, "web", st); err != nil {
		t.Fatal(err)
	}
	for _, leaser := range []string{"l1", "l2"} {
		b, _ := json.Marshal(events.PoolDemand{V: 1, Leaser: leaser, Pool: "web", WindowSeconds: 30, Waiting: 1, Refused: 1, At: r.now})
		if _, err := kvstore.PutTTL(ctx, r.store.JS, r.store.PoolDemand, events.DemandKey("web", leaser), b, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	h := r.handler(t, Config{})
	_, page := get(t, h, "/")
	for _, want := range []string{"demand 2 waiting, 2 refused, 0 held, 0 grants/s (2 leasers)",
		"autoscale 0 to 3, wants 3 (0 held of 0 on 0 Ready, 0 waiting, 2 refused, target 0.8); last 0 → 2: 2 refused, 0/0 leased, target 0.8, 0s ago"} {
		if !strings.Contains(visibleText(page), want) {
			t.Errorf("the pools table lacks %q:\n%s", want, visibleText(page))
		}
	}
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Pools) != 1 {
		t.Fatalf("pools %+v", s.Pools)
	}
	p := s.Pools[0]
	if p.Demand == nil || p.Demand.Waiting != 2 || p.Demand.Refused != 2 || p.Demand.Leasers != 2 {
		t.Fatalf("demand %+v", p.Demand)
	}
	if a := p.Autoscale; a == nil || a.Min != 0 || a.Max != 3 || a.State == nil || a.State.Desired != 2 || a.State.Inputs.Wanted != 3 ||
		p.Desired == nil || *p.Desired != 2 || p.Status != nil {
		t.Fatalf("autoscale %+v, desired %v, status %v", p.Autoscale, p.Desired, p.Status)
	}
}

// An autoscaled pool has a demand chart: its members as the autoscaler's decisions (pool
// events) stepped them, and the leases asked (held + waiting) at each decision and now; a pool
// without autoscale has none. /api/status.json carries the decisions.
func TestPoolDemandChart(t *testing.T) {
	r := newLiveRig(t)
	ctx := context.Background()
	for name, spec := range map[string]string{
		"web":   `{"template":{"provider":"local"},"autoscale":{"min":0,"max":5}}`,
		"fixed": `{"template":{"provider":"local"},"replicas":1}`,
	} {
		if _, err := r.store.Pools.Put(ctx, name, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(events.PoolDemand{V: 1, Leaser: "l1", Pool: "web", WindowSeconds: 30, Held: 2, Waiting: 3, At: r.now})
	if _, err := kvstore.PutTTL(ctx, r.store.JS, r.store.PoolDemand, events.DemandKey("web", "l1"), b, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		pool     string
		ago      time.Duration
		from, to int
		in       events.ScaleInputs
	}{
		{"web", 30 * time.Minute, 0, 3, events.ScaleInputs{Waiting: 6}},
		{"web", 15 * time.Minute, 3, 1, events.ScaleInputs{Held: 2}},
		{"fixed", 15 * time.Minute, 0, 1, events.ScaleInputs{}},
	} {
		r.publish(t, events.Event{Kind: events.KindPool, Proxy: d.pool, At: r.now.Add(-d.ago), Reason: events.ReasonScaledUp,
			Pool: &events.PoolEvent{Pool: d.pool, Scale: &events.PoolScale{From: d.from, To: d.to, Inputs: d.in}}})
	}
	h := r.handler(t, Config{Now: func() time.Time { return r.now }})
	_, page := get(t, h, "/")
	// The scale is 10 (the smallest round number over 6 asked); 30 min ago is the plot's middle.
	for _, want := range []string{`<svg id="demand-web"`,
		`points="40.0,120.0 314.0,120.0 314.0,87.0 451.0,87.0 451.0,109.0 588.0,109.0 588.0,120.0"`, // members: 0, 3, 1, none now
		`points="314.0,54.0 451.0,98.0 588.0,65.0"`,                                                 // asked: 6, 2, and 5 now
		"web: members and leases asked over the last 1h0m0s, 2 autoscale decisions"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, `id="demand-fixed"`) {
		t.Error("a pool without autoscale has a demand chart")
	}
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if w := s.PoolHistory["web"]; len(w) != 2 || w[0].Members != 3 || w[0].Waiting != 6 || w[1].Members != 1 || w[1].Held != 2 {
		t.Errorf("poolHistory %+v", s.PoolHistory)
	}
}

// The page and /api/status.json show a pool's spares (spec and computed), boot times and
// members per placement with a hold.
func TestStatusJSONPoolSparesAndPlacements(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.store.Pools.Put(ctx, "web", []byte(`{"template":{"provider":"local"},"autoscale":{"min":0,"max":9,"spares":"auto","waitTargetSeconds":2},`+
		`"placements":[{"provider":"tight"},{"provider":"roomy"}]}`)); err != nil {
		t.Fatal(err)
	}
	st := events.PoolStatus{V: 1, Phase: events.PoolReady, Reason: events.ReasonPlacementFallback, Replicas: 3, MaxMembers: 4, Members: []events.PoolMember{},
		Autoscale: &events.PoolAutoscale{Desired: 3, Inputs: events.ScaleInputs{Held: 1, Target: 0.8, Wanted: 3, Spares: 2, SparesFrom: "auto: 0.2 grants/s over 5s"}},
		Boot:      &events.BootStats{Samples: 3, P50Seconds: 1.5, P90Seconds: 7},
		Placements: []events.PlacementStatus{{Index: 0, Provider: "tight", Members: 1, Ready: 1,
			Hold: &events.PlacementHold{Reason: events.ReasonQuota, Message: "address pool exhausted", Until: r.now.Add(time.Hour)}},
			{Index: 1, Provider: "roomy", Members: 2, Ready: 2}},
		UpdatedAt: r.now}
	if _, err := kvstore.PutJSON(ctx, r.store.PoolStatus, "web", st); err != nil {
		t.Fatal(err)
	}
	h := r.handler(t, Config{})
	_, page := get(t, h, "/")
	for _, want := range []string{"spares auto: 2 (auto: 0.2 grants/s over 5s)", "boot p50 1.5s, p90 7s (last 3)",
		"placements 0 tight: 1 (1 Ready), held QuotaExceeded (address pool exhausted) until in 1h; 1 roomy: 2 (2 Ready)"} {
		if !strings.Contains(visibleText(page), want) {
			t.Errorf("the pools table lacks %q:\n%s", want, visibleText(page))
		}
	}
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	p := s.Pools[0]
	if a := p.Autoscale; a == nil || a.Spares != "auto" || a.WaitTargetSeconds != 2 || a.State.Inputs.Spares != 2 {
		t.Fatalf("autoscale %+v", p.Autoscale)
	}
	if p.Boot == nil || p.Boot.P90Seconds != 7 || len(p.Placements) != 2 || p.Placements[0].Hold == nil || p.Placements[1].Members != 2 {
		t.Fatalf("boot %+v placements %+v", p.Boot, p.Placements)
	}
}

// The chart ends with a pool's newest decision however many other pool events (drains,
// rotations, other pools' decisions) the hour holds: the history is the whole window, not
// the oldest few thousand events of it.
func TestPoolDemandChartReadsTheWholeWindow(t *testing.T) {
	r := newLiveRig(t)
	ctx := context.Background()
	if _, err := r.store.Pools.Put(ctx, "web", []byte(`{"template":{"provider":"local"},"autoscale":{"min":0,"max":5}}`)); err != nil {
		t.Fatal(err)
	}
	scale := func(ago time.Duration, from, to int) {
		r.publish(t, events.Event{Kind: events.KindPool, Proxy: "web", At: r.now.Add(-ago), Reason: events.ReasonScaledUp,
			Pool: &events.PoolEvent{Pool: "web", Scale: &events.PoolScale{From: from, To: to}}})
	}
	scale(40*time.Minute, 0, 2)
	for i := range 2500 { // more than one fetch's worth of events that are no decision
		r.publish(t, events.Event{Kind: events.KindPool, Proxy: "web", At: r.now.Add(-30 * time.Minute), Reason: events.ReasonDrainStarted,
			Pool: &events.PoolEvent{Pool: "web", Member: fmt.Sprintf("web-%d", i)}})
	}
	scale(10*time.Minute, 2, 4)
	h := r.handler(t, Config{Now: func() time.Time { return r.now }})
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if w := s.PoolHistory["web"]; len(w) != 2 || w[0].Members != 2 || w[1].Members != 4 {
		t.Errorf("poolHistory %+v, want the decisions to 2 and to 4 members", s.PoolHistory)
	}
}

// The page lists the addresses in quarantine, with the burned member and when each ends, and
// /api/status.json carries them; a record past its end is left out.
func TestPageShowsQuarantine(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, q := range []events.Quarantine{
		{V: 1, Address: "127.0.97.2", Prefix: "127.0.97.0/24", Pool: "web", Proxy: "web-a1b2c", Reason: events.ReasonBurned, At: r.now.Add(-time.Hour), Until: r.now.Add(2 * time.Hour)},
		{V: 1, Address: "127.0.98.2", Prefix: "127.0.98.2/32", Pool: "web", Proxy: "web-d3e4f", Reason: events.ReasonBurned, At: r.now.Add(-25 * time.Hour), Until: r.now.Add(-time.Hour)},
	} {
		if _, err := kvstore.PutJSON(ctx, r.store.Quarantine, events.QuarantineKey(q.Address), q); err != nil {
			t.Fatal(err)
		}
	}
	h := r.handler(t, Config{Now: func() time.Time { return r.now }})
	_, page := get(t, h, "/")
	text := visibleText(page)
	if !strings.Contains(text, "Addresses in quarantine") || !strings.Contains(text, "127.0.97.2 127.0.97.0/24 web-a1b2c web") {
		t.Errorf("the page lacks the quarantine table:\n%s", text)
	}
	if strings.Contains(text, "127.0.98.2") {
		t.Error("an address whose quarantine ended is listed")
	}
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Quarantine) != 1 || s.Quarantine[0].Proxy != "web-a1b2c" {
		t.Errorf("quarantine %+v", s.Quarantine)
	}
}
