package leaser

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// view is one replica's picture of the fleet, fed by KV watches. It is only ever used to
// choose and order candidates and to explain a refusal; every decision that must be exact is
// made by the server (the slot Create, the CAS of a renewal or release).
type view struct {
	mu      sync.RWMutex
	proxies map[string]*proxyView
	// Newest revision applied per key of proxy_leases and proxy_cooldowns, deletes and
	// expiries included. The handlers write what they just did into the view before the watch
	// echoes it (so the next request on this replica sees it); the revisions keep an echo, or
	// a late write, from undoing a newer state.
	leaseRev map[string]uint64
	coolRev  map[string]uint64
	sticky   map[string]stickyRef

	// Holder caps and sessions (holders.go, sessions.go), fed by the pools and lease_state
	// watches: each pool's maxPerHolder, the default of proxies in no pool or in a pool
	// without one, the holder slots held by scope and holder, and the sessions bound.
	poolCaps   map[string]int
	defaultCap int
	holds      map[holdScope]map[int]holdRef
	sessions   map[string]sessionRef // by lease_state key
	stateRev   map[string]uint64     // newest revision applied per lease_state key

	// The selection index (index.go).
	specced    map[*proxyView]struct{}              // proxies with a valid spec
	byAttr     map[attrPair]map[*proxyView]struct{} // of those, by attribute pair
	sets       map[string]*selSet                   // by selectorKey
	coolTarget map[string]map[*proxyView]struct{}   // proxies cooling down, by target
	clock      atomic.Uint64                        // orders the sets' last use

	// Leftovers (leftovers.go): the newest revision of proxies seen, whether stale slots are
	// looked for yet (once every watch has its initial values), the slots found stale and
	// waiting for the sweeper, grants given up on, and why recently removed leases ended.
	specHigh  uint64
	sweeping  bool
	removals  map[string]removal
	wake      chan struct{}
	abandoned map[string]time.Time  // token → until
	ended     map[string]endedLease // token → why
}

// proxyView is what the view knows of one proxy. Fields are grouped by the bucket that feeds
// them; a proxy missing from a bucket has that group's zero value.
type proxyView struct {
	name string
	// proxies
	hasSpec   bool
	attrs     map[string]string
	maxLeases int
	auth      *schemas.Auth
	external  bool
	drain     bool   // "drain": true: never granted again, held leases renew and run on
	origin    origin // provider and pool, for the lease statistics and holder caps
	specRev   uint64 // of the newest entry of the proxy's key, a delete included
	specGone  bool   // that entry is a delete or purge
	// proxy_status
	hasStatus bool
	phase     events.Phase
	ip        string
	port      int
	provider  string
	host      string
	statusRev uint64
	instance  string        // events.ProxyStatus.Incarnation
	teardown  events.Reason // why the instance must go (replaced, recreated, deleted); "" while it stays
	addressAt time.Time
	// proxy_health
	latencyMs float64            // 0: unknown
	health    events.ProxyHealth // what the anonymity verdict needs of the record: address, probe time, verdict
	// proxy_leases
	slots      map[int]slotState
	held       int // slots below maxLeases
	lastLeased time.Time
	// proxy_cooldowns: targets cooling down, "" for every target
	cooling map[string]bool

	ix indexed // how the selection index accounts for it
}

// slotState is a held slot: the record and the revision it was read or written at.
type slotState struct {
	rev   uint64
	lease events.Lease
}

type stickyRef struct {
	proxy string
	at    time.Time
}

// maxSticky bounds the sticky memory; beyond it the oldest tenth is forgotten.
const maxSticky = 100_000

func newView() *view {
	return &view{proxies: map[string]*proxyView{}, leaseRev: map[string]uint64{}, coolRev: map[string]uint64{},
		sticky: map[string]stickyRef{}, poolCaps: map[string]int{}, holds: map[holdScope]map[int]holdRef{},
		sessions: map[string]sessionRef{}, stateRev: map[string]uint64{}, specced: map[*proxyView]struct{}{}, byAttr: map[attrPair]map[*proxyView]struct{}{},
		sets: map[string]*selSet{}, coolTarget: map[string]map[*proxyView]struct{}{},
		removals: map[string]removal{}, wake: make(chan struct{}, 1), abandoned: map[string]time.Time{}, ended: map[string]endedLease{}}
}

// proxy returns the entry of name, creating it. Callers hold mu.
func (v *view) proxy(name string) *proxyView {
	p := v.proxies[name]
	if p == nil {
		p = &proxyView{name: name, slots: map[int]slotState{}, cooling: map[string]bool{}}
		v.proxies[name] = p
	}
	return p
}

// setSlot records a held slot, keeping held.
func (p *proxyView) setSlot(slot int, st slotState) {
	if _, was := p.slots[slot]; !was && slot < p.maxLeases {
		p.held++
	}
	p.slots[slot] = st
}

// dropSlot forgets a held slot, keeping held.
func (p *proxyView) dropSlot(slot int) (slotState, bool) {
	old, was := p.slots[slot]
	if was {
		delete(p.slots, slot)
		if slot < p.maxLeases {
			p.held--
		}
	}
	return old, was
}

// changed folds a change of name's entry into the index and drops the entry if nothing
// refers to it any more. Callers hold mu.
func (v *view) changed(p *proxyView) {
	v.reindex(p)
	v.forget(p.name)
}

// forget drops an entry nothing refers to any more. Callers hold mu.
func (v *view) forget(name string) {
	p := v.proxies[name]
	if p != nil && !p.hasSpec && !p.hasStatus && p.latencyMs == 0 && p.health.Address == "" && len(p.slots) == 0 && len(p.cooling) == 0 {
		delete(v.proxies, name)
	}
}

func isPut(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValuePut }

// applySpec folds an entry of proxies. An invalid spec (or an invalid name) makes the proxy
// unleasable: the reconciler reports the problem, not us.
func (v *view) applySpec(e jetstream.KeyValueEntry) {
	name := e.Key()
	if schemas.ValidName(name) != nil {
		return
	}
	var spec schemas.ProxySpec
	ok := false
	if isPut(e) {
		var err error
		spec, err = schemas.ParseProxySpec(e.Value())
		ok = err == nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.proxy(name)
	p.specRev, p.specGone = e.Revision(), !isPut(e)
	v.specHigh = max(v.specHigh, e.Revision())
	defer v.findStale(p)
	p.hasSpec = ok
	p.attrs, p.auth, p.maxLeases, p.external, p.drain = nil, nil, 0, false, false
	if ok {
		p.attrs, p.auth, p.maxLeases = spec.Attributes, spec.Auth, *spec.MaxLeases
		p.external, p.drain = spec.Mode == schemas.ModeExternal, spec.Drain
		p.origin = origin{provider: spec.Provider, pool: spec.Pool}
		if p.external {
			p.origin.provider = events.External
		}
	}
	p.held = 0
	for s := range p.slots {
		if s < p.maxLeases {
			p.held++
		}
	}
	v.changed(p)
}

// applyStatus folds an entry of proxy_status.
func (v *view) applyStatus(e jetstream.KeyValueEntry) {
	var st events.ProxyStatus
	ok := isPut(e) && json.Unmarshal(e.Value(), &st) == nil
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.proxy(e.Key())
	p.hasStatus = ok
	p.phase, p.ip, p.port, p.provider, p.host = st.Phase, st.IP, st.Port, st.Provider, st.Host
	p.statusRev, p.instance, p.teardown, p.addressAt = e.Revision(), st.Incarnation(), st.Teardown, st.AddressAt
	v.findStale(p)
	v.changed(p)
}

// applyHealth folds an entry of proxy_health: the latency ranks, and the anonymity verdict
// serves an acquire's minAnonymity; the reconciler already turns health into the phase.
func (v *view) applyHealth(e jetstream.KeyValueEntry) {
	var h events.ProxyHealth
	if isPut(e) && json.Unmarshal(e.Value(), &h) != nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.proxy(e.Key())
	p.latencyMs = h.LatencyMs
	p.health = events.ProxyHealth{Address: h.Address, LastProbeAt: h.LastProbeAt, Anonymity: h.Anonymity}
	v.changed(p)
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
		p := v.proxy(proxy)
		old, held := p.dropSlot(slot)
		v.changed(p)
		if held && e.Operation() == jetstream.KeyValuePurge {
			return &old
		}
		return nil
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
	p := v.proxy(proxy)
	p.setSlot(slot, slotState{rev: rev, lease: l})
	v.noteSlot(p, key, rev, l)
	if l.AcquiredAt.After(p.lastLeased) {
		p.lastLeased = l.AcquiredAt
	}
	v.reindex(p)
	if l.Sticky != "" {
		if ref, seen := v.sticky[l.Sticky]; !seen || !l.AcquiredAt.Before(ref.at) {
			v.sticky[l.Sticky] = stickyRef{proxy: proxy, at: l.AcquiredAt}
			v.trimSticky()
		}
	}
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
	p := v.proxies[proxy]
	if p == nil {
		return
	}
	if s, held := p.slots[slot]; held && s.rev == rev {
		p.dropSlot(slot)
		v.changed(p)
	}
	v.leaseRev[key] = max(v.leaseRev[key], rev)
}

// trimSticky forgets the oldest tenth of the sticky memory once it is full. Callers hold mu.
func (v *view) trimSticky() {
	if len(v.sticky) <= maxSticky {
		return
	}
	refs := slices.SortedFunc(maps.Keys(v.sticky), func(a, b string) int { return v.sticky[a].at.Compare(v.sticky[b].at) })
	for _, k := range refs[:len(refs)/10] {
		delete(v.sticky, k)
	}
}

// applyCooldown folds an entry of proxy_cooldowns.
func (v *view) applyCooldown(e jetstream.KeyValueEntry) {
	v.noteCooldown(e.Key(), e.Revision(), isPut(e))
}

// noteCooldown records that key is (on) or is no longer (!on) cooling down as of rev.
func (v *view) noteCooldown(key string, rev uint64, on bool) {
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
	p := v.proxy(proxy)
	if on {
		p.cooling[target] = true
	} else {
		delete(p.cooling, target)
	}
	if target != "" {
		v.noteTargetCooling(p, target, on)
	}
	v.changed(p)
}

// endpoint is where a lease's holder connects, and what a probe checks.
type endpoint struct {
	ip       string
	port     int
	auth     *schemas.Auth
	provider string
	host     string
}

// lookup returns the connection details of proxy, and whether slot is still within its
// maxLeases (a shrunk maxLeases lets the slots above it drain).
func (v *view) lookup(proxy string, slot int) (t endpoint, known, inRange bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.proxies[proxy]
	if p == nil || !p.hasSpec {
		return endpoint{}, false, false
	}
	return p.endpoint(), true, slot < p.maxLeases
}

// endpoint is p's address, credentials and probe routing. Callers hold mu.
func (p *proxyView) endpoint() endpoint {
	e := endpoint{ip: p.ip, port: p.port, auth: p.auth, provider: p.provider, host: p.host}
	if p.external {
		e.provider, e.host = events.External, events.External
	}
	return e
}
