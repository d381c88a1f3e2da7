package pools

import (
	"encoding/json"
	"fmt"
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
