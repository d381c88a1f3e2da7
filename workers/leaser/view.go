package leaser

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// view is one replica's picture of the fleet, fed by KV watches: it turns their entries into
// the typed updates of the selection core (fleet, where the lease order is decided), dropping
// an entry older than what it already applied, and keeps what only the shell needs (holder
// slots, sessions, leftovers). It is only ever used to choose and order candidates and to
// explain a refusal; every decision that must be exact is made by the server (the slot
// Create, the CAS of a renewal or release).
type view struct {
	fleet *selection.Fleet // safe for concurrent use; written only under mu, so in revision order
	waits *selection.Queue // the waiting acquires of every replica (wait.go); written under mu

	mu sync.RWMutex
	// Newest revision applied per key of proxy_leases and proxy_cooldowns, deletes and
	// expiries included. The handlers write what they just did into the view before the watch
	// echoes it (so the next request on this replica sees it); the revisions keep an echo, or
	// a late write, from undoing a newer state.
	leaseRev map[string]uint64
	coolRev  map[string]uint64
	// The strike records of proxy_cooldowns present (strikes.go), so that a success costs a
	// KV round trip only where there is a strike to take off.
	strikes map[string]bool

	// Holder slots and sessions (holders.go, sessions.go), fed by the lease_state watch: the
	// holder slots held by scope and holder, and the sessions bound.
	holds    map[holdScope]map[int]holdRef
	sessions map[string]sessionRef // by lease_state key
	stateRev map[string]uint64     // newest revision applied per lease_state key

	// Leftovers (leftovers.go): the newest revision of proxies seen, whether stale slots are
	// looked for yet (once every watch has its initial values), the slots found stale and
	// waiting for the sweeper, grants given up on, and why recently removed leases ended.
	specHigh  uint64
	sweeping  bool
	removals  map[string]removal
	wake      chan struct{}
	abandoned map[string]time.Time  // token → until
	ended     map[string]endedLease // token → why

	// The pools with autoscale, by name: an acquire that names one and no strategy packs
	// (holders.go, defaultStrategy).
	autoscaled map[string]bool

	// The held slots whose lease has a request ID, both ways (requests.go): a retry whose
	// first try granted but died before recording it finds the lease here.
	reqSlot map[reqRef]string
	slotReq map[string]reqRef
}

// slotState is a held slot: the record and the revision it was read or written at.
type slotState struct {
	rev   uint64
	lease events.Lease
}

// newView returns an empty view whose holder limit is defaultCap wherever a pool sets none.
func newView(defaultCap int) *view {
	return &view{fleet: selection.NewFleet(defaultCap), waits: selection.NewQueue(), leaseRev: map[string]uint64{}, coolRev: map[string]uint64{},
		strikes: map[string]bool{}, holds: map[holdScope]map[int]holdRef{}, sessions: map[string]sessionRef{}, stateRev: map[string]uint64{},
		removals: map[string]removal{}, wake: make(chan struct{}, 1), abandoned: map[string]time.Time{}, ended: map[string]endedLease{},
		reqSlot: map[reqRef]string{}, slotReq: map[string]reqRef{}, autoscaled: map[string]bool{}}
}

func isPut(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValuePut }

// applySpec folds an entry of proxies. An invalid spec (or an invalid name) makes the proxy
// unleasable: the reconciler reports the problem, not us.
func (v *view) applySpec(e jetstream.KeyValueEntry) {
	name := e.Key()
	if schemas.ValidName(name) != nil {
		return
	}
	var spec *schemas.ProxySpec
	if isPut(e) {
		if s, err := schemas.ParseProxySpec(e.Value()); err == nil {
			spec = &s
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.specHigh = max(v.specHigh, e.Revision())
	v.fleet.SetSpec(name, e.Revision(), !isPut(e), spec)
	v.findStale(name)
}

// applyStatus folds an entry of proxy_status.
func (v *view) applyStatus(e jetstream.KeyValueEntry) {
	var st events.ProxyStatus
	ok := isPut(e) && json.Unmarshal(e.Value(), &st) == nil
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fleet.SetStatus(e.Key(), e.Revision(), st, ok)
	v.findStale(e.Key())
}

// applyHealth folds an entry of proxy_health; an unreadable record changes nothing.
func (v *view) applyHealth(e jetstream.KeyValueEntry) {
	var h events.ProxyHealth
	if isPut(e) && json.Unmarshal(e.Value(), &h) != nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fleet.SetHealth(e.Key(), h)
}

// applyLease folds an entry of proxy_leases. When a held slot is purged (its TTL ran out) it
// returns the lease that expired and the revision it had, for the "expired" event.
func (v *view) applyLease(e jetstream.KeyValueEntry) (expired *slotState) {
	proxy, slot, ok := parseSlotKey(e.Key())
	if !ok {
		return nil
	}
	if !isPut(e) {
		var note events.SlotEnd
		if len(e.Value()) > 0 && json.Unmarshal(e.Value(), &note) == nil {
			v.noteEnded(note.Token, note.End) // a leaser ended the lease with its proxy
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if e.Revision() <= v.leaseRev[e.Key()] {
			return nil
		}
		v.leaseRev[e.Key()] = e.Revision()
		v.indexRequest(e.Key(), events.Lease{})
		old, held := v.fleet.SlotFreed(proxy, slot)
		if held && e.Operation() == jetstream.KeyValuePurge {
			return &slotState{rev: old.Rev, lease: old.Lease}
		}
		return nil
	}
	v.mu.Lock()
	known := e.Revision() <= v.leaseRev[e.Key()]
	v.mu.Unlock()
	if known { // the echo of a grant this replica counted when its Create returned
		return nil // noteLease would drop it: no need to decode it first
	}
	var l events.Lease
	if json.Unmarshal(e.Value(), &l) != nil {
		l = events.Lease{Proxy: proxy, Slot: slot} // still a held slot, whoever wrote it
	}
	v.noteLease(e.Key(), e.Revision(), l)
	return nil
}

// noteLease records a held slot at rev unless the view already has something newer.
func (v *view) noteLease(key string, rev uint64, l events.Lease) {
	proxy, slot, ok := parseSlotKey(key)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev <= v.leaseRev[key] {
		return
	}
	v.leaseRev[key] = rev
	v.fleet.SlotHeld(proxy, slot, selection.Slot{Rev: rev, Lease: l})
	v.indexRequest(key, l)
	v.noteSlot(proxy, key, rev, l)
}

// noteReleased removes a slot this replica just deleted at rev (the delete marker's own
// revision is not returned by the server, so rev marks "everything up to the lease").
func (v *view) noteReleased(key string, rev uint64) {
	proxy, slot, ok := parseSlotKey(key)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.fleet.SlotFreedAt(proxy, slot, rev) {
		return // a proxy the fleet forgot leaves the revision to the watch, as it always did
	}
	v.leaseRev[key] = max(v.leaseRev[key], rev)
	v.indexRequest(key, events.Lease{})
}

// applyCooldown folds an entry of proxy_cooldowns.
func (v *view) applyCooldown(e jetstream.KeyValueEntry) {
	if strings.HasSuffix(e.Key(), ".strikes") {
		v.noteStrikes(e.Key(), isPut(e))
		return
	}
	v.noteCooldown(e.Key(), e.Revision(), isPut(e), cooldownEnd(e.Value()))
}

// cooldownEnd is a cooldown record's Until (zero when it does not decode: the cooldown
// still holds, only its end is unknown).
func cooldownEnd(b []byte) time.Time {
	var c struct {
		Until time.Time `json:"until"`
	}
	if len(b) == 0 || json.Unmarshal(b, &c) != nil {
		return time.Time{}
	}
	return c.Until
}

// noteStrikes records whether the strike record key is present. An echo that comes late
// can only make a success cost one more KV read, or leave a strike to fade with its TTL.
func (v *view) noteStrikes(key string, present bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if present {
		v.strikes[key] = true
	} else {
		delete(v.strikes, key)
	}
}

// struck says whether the strike record key was last seen present.
func (v *view) struck(key string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.strikes[key]
}

// noteCooldown records that key is (on) or is no longer (!on) cooling down as of rev, until
// end where known (zero: unknown).
func (v *view) noteCooldown(key string, rev uint64, on bool, end time.Time) {
	proxy, target, ok := parseCooldownKey(key)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev <= v.coolRev[key] {
		return
	}
	v.coolRev[key] = rev
	v.fleet.SetCooling(proxy, target, on, end)
}
