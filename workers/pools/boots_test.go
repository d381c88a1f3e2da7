package pools

import (
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestBootStats(t *testing.T) {
	samples := func(secs ...float64) []events.BootSample {
		var out []events.BootSample
		for _, s := range secs {
			out = append(out, events.BootSample{Seconds: s})
		}
		return out
	}
	for _, tc := range []struct {
		in       []events.BootSample
		p50, p90 float64
	}{
		{in: samples(7), p50: 7, p90: 7},
		{in: samples(9, 1), p50: 1, p90: 9},
		{in: samples(10, 1, 2, 3, 4, 5, 6, 7, 8, 9), p50: 5, p90: 9},
		{in: samples(10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 30), p50: 6, p90: 10},
	} {
		st := bootStats(tc.in)
		if st.Samples != len(tc.in) || st.P50Seconds != tc.p50 || st.P90Seconds != tc.p90 {
			t.Errorf("%v: %+v, want p50 %g p90 %g", tc.in, st, tc.p50, tc.p90)
		}
	}
	if bootStats(nil) != nil {
		t.Error("stats of no boot")
	}
}

// Each member's boot is recorded once, in the record (a takeover keeps it), the newest
// BootSamples of them; auto spares are sized from them.
func TestPlanRecordsBootsAndSizesSpares(t *testing.T) {
	w := newWorld(t, `{"template":{"provider":"local","maxLeases":1},"autoscale":{"min":0,"max":20,"targetUtilization":1,"spares":"auto"}}`)
	w.boot = map[string]time.Duration{}
	demand := events.DemandSum{Refused: 2, Leasers: 1}
	pass := func() outcome { return w.stepWith(demand) }
	pass()
	if len(w.owned) != 2 || w.ledger.Boot != nil || w.ledger.Autoscale.Inputs.Spares != 0 {
		t.Fatalf("no boot measured: %d members, %+v", len(w.owned), w.ledger)
	}
	for i, n := range sortedKeys(w.owned) {
		w.boot[n] = time.Duration(10+10*i) * time.Second // 10 s and 20 s
	}
	demand = events.DemandSum{Held: 2, GrantsPerSecond: 0.1, Leasers: 1}
	for n := range w.owned {
		w.leases[n] = 1
	}
	for range 3 {
		pass()
	}
	st := w.ledger
	if len(st.Boots) != 2 || st.Boot.P50Seconds != 10 || st.Boot.P90Seconds != 20 {
		t.Fatalf("boots %+v, stats %+v", st.Boots, st.Boot)
	}
	for _, m := range st.Members {
		if _, ok := w.boot[m.Name]; ok && !m.Booted {
			t.Fatalf("member %s not marked booted", m.Name)
		}
	}
	// 0.1 grants/s over a 20 s p90: Poisson(2), 5 arrivals at 95 %: 5 spares on 2 held.
	if in := st.Autoscale.Inputs; in.Spares != 5 || st.Autoscale.Desired != 7 || len(w.owned) != 7 {
		t.Fatalf("spares %d (%s), desired %d, %d members", in.Spares, in.SparesFrom, st.Autoscale.Desired, len(w.owned))
	}
	// Many more boots: only the newest BootSamples stay.
	for i := range 30 {
		n := fmt.Sprintf("web-x%04d", i)
		w.ledger.Members = append(w.ledger.Members, events.PoolMember{Name: n, CreatedAt: w.now})
		w.boot[n] = time.Second
	}
	pass()
	if len(w.ledger.Boots) != events.BootSamples || w.ledger.Boots[len(w.ledger.Boots)-1].Seconds != 1 {
		t.Fatalf("%d boots kept", len(w.ledger.Boots))
	}
}
