package pools

import (
	"encoding/json"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// The demand the leasers measure (pool_demand), as the view follows it: the newest record of
// every leaser replica per pool. A record that expires (its leaser died or has nothing more
// to say) arrives as a delete and leaves the sum.

// applyDemand folds an entry of pool_demand. A record saying acquires wait or were refused
// wakes the pool's pass at once: that is a scale-up, and it should not wait for the resync.
func (v *view) applyDemand(e jetstream.KeyValueEntry) {
	scope := events.DemandScopeOf(e.Key())
	if scope == "" || events.IsSelectorScope(scope) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	recs := v.demand[scope]
	var d events.PoolDemand
	if !isPut(e) || json.Unmarshal(e.Value(), &d) != nil || d.V != 1 {
		delete(recs, e.Key())
		if len(recs) == 0 {
			delete(v.demand, scope)
		}
		return
	}
	if recs == nil {
		recs = map[string]events.PoolDemand{}
		v.demand[scope] = recs
	}
	recs[e.Key()] = d
	if _, ok := v.pools[scope]; ok && d.Waiting+d.Refused > 0 {
		v.mark(scope)
	}
}

// demandOf is the pool's demand summed over the leasers' records.
func (v *view) demandOf(pool string) events.DemandSum {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s events.DemandSum
	for _, d := range v.demand[pool] {
		s.Add(d)
	}
	return s
}
