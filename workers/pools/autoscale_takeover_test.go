package pools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// The autoscaler's state is in the pool's record, not in a controller's memory: demand read
// from pool_demand scales the pool up; when it is gone, the low-demand clock starts; a new
// controller taking over keeps that clock, so once scaleDownAfterSeconds has passed since the
// first controller saw demand fall, the new one scales down at once rather than starting to
// wait again. The pool never has more than max members.
func TestAutoscaleStateSurvivesTakeover(t *testing.T) {
	r := newRig(t)
	r.reconcile()
	highest, current := r.watchMembers("auto")
	stopA := r.controller("a")
	r.putPool("auto", `{"template":{"provider":"local"},"autoscale":{"min":0,"max":3,"scaleDownAfterSeconds":600,"targetUtilization":1,"scaleDownStep":3}}`)
	b, _ := json.Marshal(events.PoolDemand{V: 1, Leaser: "l1", Pool: "auto", WindowSeconds: 30, Refused: 5, At: r.now()})
	key := events.DemandKey("auto", "l1")
	if _, err := kvstore.PutTTL(r.ctx, r.store.JS, r.store.PoolDemand, key, b, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the pool scaled up to max on refusals", func() (bool, string) {
		st, _ := r.ledger("auto")
		return st.Autoscale != nil && st.Autoscale.Desired == 3 && current() == 3, fmt.Sprintf("%+v, %d members", st.Autoscale, current())
	})
	if err := r.store.PoolDemand.Delete(r.ctx, key); err != nil {
		t.Fatal(err)
	}
	var low time.Time
	r.waitFor("the low-demand clock started", func() (bool, string) {
		st, _ := r.ledger("auto")
		low = st.Autoscale.LowSince
		return !low.IsZero() && st.Autoscale.Desired == 3, fmt.Sprintf("%+v", st.Autoscale)
	})
	stopA()

	// Past the delay as the first controller started it: the new controller scales down.
	r.offset.Add(int64(601 * time.Second))
	stopB := r.controller("b")
	defer stopB()
	r.waitFor("the new controller scaled to zero", func() (bool, string) {
		st, _ := r.ledger("auto")
		return st.Autoscale.Desired == 0 && current() == 0, fmt.Sprintf("%+v, %d members", st.Autoscale, current())
	})
	st, _ := r.ledger("auto")
	if !st.Autoscale.LastDecisionAt.After(low) || st.Autoscale.LastDecision == "" {
		t.Fatalf("last decision %q at %v", st.Autoscale.LastDecision, st.Autoscale.LastDecisionAt)
	}
	if n := highest(); n > 3 {
		t.Fatalf("%d members at one point; max is 3", n)
	}
}

// Boot times and the spares sized from them live in the pool's record: with spares "auto",
// once members have booted (7 s each) a grant rate of 0.5/s keeps Q95(Poisson(3.5)) = 7
// spares; a controller taking over counts no boot twice and sizes spares from the record.
func TestSparesSurviveTakeover(t *testing.T) {
	r := newRig(t)
	r.reconcile()
	highest, current := r.watchMembers("warm")
	stopA := r.controller("a")
	r.putPool("warm", `{"template":{"provider":"local"},"autoscale":{"min":0,"max":9,"targetUtilization":1,"spares":"auto"}}`)
	demand := func(at time.Time, rate float64) {
		b, _ := json.Marshal(events.PoolDemand{V: 1, Leaser: "l1", Pool: "warm", WindowSeconds: 30, Refused: 1, Granted: int(rate * 30), GrantsPerSecond: rate, At: at})
		if _, err := kvstore.PutTTL(r.ctx, r.store.JS, r.store.PoolDemand, events.DemandKey("warm", "l1"), b, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	demand(r.now(), 0.5)
	r.waitFor("one member for the refusal, then 7 spares once it booted", func() (bool, string) {
		st, _ := r.ledger("warm")
		return st.Autoscale != nil && st.Autoscale.Desired == 8 && st.Autoscale.Inputs.Spares == 7 && current() == 8,
			fmt.Sprintf("%+v, boots %+v, %d members", st.Autoscale, st.Boot, current())
	})
	r.waitFor("every member's boot recorded once", func() (bool, string) {
		st, _ := r.ledger("warm")
		return len(st.Boots) == 8 && st.Boot.P90Seconds == rigBoot.Seconds(), fmt.Sprintf("%+v", st.Boots)
	})
	stopA()
	stopB := r.controller("b")
	defer stopB()
	// The rate falls to 0.2/s: Q95(Poisson(1.4)) = 4 spares, from the boots in the record;
	// the count stays until scaleDownAfterSeconds.
	demand(r.now(), 0.2)
	r.waitFor("the new controller sized spares from the recorded boots", func() (bool, string) {
		st, _ := r.ledger("warm")
		return strings.Contains(st.Autoscale.Inputs.SparesFrom, "0.2 grants/s") && st.Autoscale.Inputs.Spares == 4, fmt.Sprintf("%+v", st.Autoscale)
	})
	st, _ := r.ledger("warm")
	if len(st.Boots) != 8 || st.Autoscale.Desired != 8 {
		t.Fatalf("after the takeover: %d boots, %+v", len(st.Boots), st.Autoscale)
	}
	if n := highest(); n > 9 {
		t.Fatalf("%d members at one point; max is 9", n)
	}
}
