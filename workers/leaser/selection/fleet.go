package selection

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Fleet is one replica's picture of the fleet as far as choosing proxies needs it, with the
// selection index that keeps choosing cheap. It is fed by typed updates the shell makes from
// KV entries (the order in which they arrive is the shell's concern: it drops stale ones by
// revision), and only ever used to choose and order candidates and to explain a refusal.
type Fleet struct {
	mu      sync.RWMutex
	proxies map[string]*proxyView
	sticky  map[string]stickyRef // sticky key → the proxy of its newest lease

	// Holder caps: each pool's maxPerHolder and the default of proxies in no pool or in a
	// pool without one. A candidate carries its pool's, for the shell's holder slots.
	poolCaps   map[string]int
	defaultCap int

	// The selection index (index.go).
	specced    map[*proxyView]struct{}              // proxies with a valid spec
	byAttr     map[attrPair]map[*proxyView]struct{} // of those, by attribute pair
	sets       map[string]*selSet                   // by selectorKey
	coolTarget map[string]map[*proxyView]struct{}   // proxies cooling down, by target
	clock      atomic.Uint64                        // orders the sets' last use

	// Neighbourhoods (neighbours.go), when set: the proxies of each, and per holder and
	// target the proxies where it holds leases, so that spreading costs what it touches.
	hood  Neighbourhood
	hoods map[string]map[*proxyView]struct{}
	held  map[holderTarget]map[*proxyView]int

	// best-for-target (best.go): what each proxy did lately per target, by name.
	learn     Learning
	outcomes  map[string]map[string]*outcome
	nOutcomes int
}

type stickyRef struct {
	proxy string
	at    time.Time
}

// maxSticky bounds the sticky memory; beyond it the oldest tenth is forgotten.
const maxSticky = 100_000

// NewFleet returns an empty fleet whose holder limit is defaultCap (0: none) wherever a pool
// sets none.
func NewFleet(defaultCap int) *Fleet {
	return &Fleet{proxies: map[string]*proxyView{}, sticky: map[string]stickyRef{}, poolCaps: map[string]int{},
		defaultCap: defaultCap, specced: map[*proxyView]struct{}{}, byAttr: map[attrPair]map[*proxyView]struct{}{},
		sets: map[string]*selSet{}, coolTarget: map[string]map[*proxyView]struct{}{},
		hoods: map[string]map[*proxyView]struct{}{}, held: map[holderTarget]map[*proxyView]int{},
		learn: Learning{HalfLife: DefaultHalfLife, Explore: DefaultExplore}, outcomes: map[string]map[string]*outcome{}}
}

// proxy returns the entry of name, creating it. Callers hold mu.
func (f *Fleet) proxy(name string) *proxyView {
	p := f.proxies[name]
	if p == nil {
		p = &proxyView{name: name, slots: map[int]Slot{}, cooling: map[string]bool{}}
		f.proxies[name] = p
	}
	return p
}

// changed folds a change of p into the index and drops p if nothing refers to it any more.
// Callers hold mu for writing.
func (f *Fleet) changed(p *proxyView) {
	f.reindex(p)
	if !p.hasSpec && !p.hasStatus && p.latencyMs == 0 && p.health.Address == "" && len(p.slots) == 0 && len(p.cooling) == 0 {
		delete(f.proxies, p.name)
		f.rehood(p, "")
		return
	}
	if f.hood.On() {
		f.rehood(p, f.hood.key(p))
	}
}

// SetSpec applies an entry of proxies at rev: spec is the parsed spec, nil when the entry is
// a delete (gone) or does not parse, which makes the proxy unleasable (the reconciler reports
// the problem, not the leaser).
func (f *Fleet) SetSpec(name string, rev uint64, gone bool, spec *schemas.ProxySpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxy(name)
	p.specRev, p.specGone = rev, gone
	p.hasSpec = spec != nil
	p.attrs, p.maxLeases, p.external, p.drain = nil, 0, false, false
	p.placement = schemas.Placement{}
	var auth *schemas.Auth
	if spec != nil {
		p.attrs, auth, p.maxLeases = spec.Attributes, spec.Auth, *spec.MaxLeases
		p.placement = spec.Placement
		p.external, p.drain = spec.Mode == schemas.ModeExternal, spec.Drain
		p.origin = Origin{Provider: spec.Provider, Pool: spec.Pool}
		if p.external {
			p.origin.Provider = events.External
		}
	}
	p.creds.SetSpec(rev, auth)
	p.held = 0
	for s := range p.slots {
		if s < p.maxLeases {
			p.held++
		}
	}
	f.changed(p)
}

// SetStatus applies an entry of proxy_status at rev; ok is false when the entry is a delete
// or does not parse, and st then holds whatever did.
func (f *Fleet) SetStatus(name string, rev uint64, st events.ProxyStatus, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxy(name)
	if p.ip != "" && st.IP != p.ip {
		f.forgetOutcomes(name) // a site's verdict is on the address it saw
	}
	p.hasStatus = ok
	p.phase, p.ip, p.port, p.provider, p.host = st.Phase, st.IP, st.Port, st.Provider, st.Host
	p.statusRev, p.instance, p.teardown, p.addressAt = rev, st.Incarnation(), st.Teardown, st.AddressAt
	p.gen, p.expected = st.Generation, st.ExpectedEgress
	p.retiring = p.retiring[:0]
	for _, r := range st.Retiring {
		p.retiring = append(p.retiring, r.Incarnation())
	}
	p.creds.SetStatus(st.AuthRevision)
	f.changed(p)
}

// MissingAuth is the revision of proxies whose auth name's instance carries, when the fleet
// has not seen it (a replica started in the middle of a credential rollout): the shell reads
// it and hands it to ResolveAuth. Until then the proxy is not leased (fail closed).
func (f *Fleet) MissingAuth(name string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.proxies[name]
	if !ok {
		return 0, false
	}
	return p.creds.Missing()
}

// ResolveAuth records the auth of rev of name's spec, read back from proxies.
func (f *Fleet) ResolveAuth(name string, rev uint64, a *schemas.Auth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxies[name]; ok {
		p.creds.Resolve(rev, a)
		f.changed(p)
	}
}

// SetHealth applies an entry of proxy_health (the zero record for a delete): the latency
// ranks, and the anonymity verdict serves minAnonymity; the reconciler already turns health
// into the phase.
func (f *Fleet) SetHealth(name string, h events.ProxyHealth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxy(name)
	p.latencyMs = h.LatencyMs
	p.health = events.ProxyHealth{Address: h.Address, LastProbeAt: h.LastProbeAt, Anonymity: h.Anonymity, EgressIP: h.EgressIP}
	f.changed(p)
}

// SetCooling records that proxy is (on) or is no longer cooling down for target ("" for
// every target), until end when it is known (zero: unknown), for a refusal's nextAllowedAt.
func (f *Fleet) SetCooling(proxy, target string, on bool, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxy(proxy)
	if on {
		p.cooling[target] = true
		if target != "" && !end.IsZero() {
			if p.coolEnd == nil {
				p.coolEnd = map[string]time.Time{}
			}
			p.coolEnd[target] = end
		}
	} else {
		delete(p.cooling, target)
		delete(p.coolEnd, target)
	}
	if target != "" {
		f.noteTargetCooling(p, target, on)
	}
	f.changed(p)
}

// SlotHeld records that slot of proxy holds s (a grant, a renewal, or a slot a watch brought):
// it counts in the proxy's load, and a sticky lease makes the proxy its key's.
func (f *Fleet) SlotHeld(proxy string, slot int, s Slot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxy(proxy)
	if old, was := p.slots[slot]; was {
		f.noteHeld(p, old.Lease, -1)
	}
	p.setSlot(slot, s)
	f.noteHeld(p, s.Lease, 1)
	l := s.Lease
	if l.AcquiredAt.After(p.lastLeased) {
		p.lastLeased = l.AcquiredAt
	}
	f.reindex(p)
	if l.Sticky != "" {
		if ref, seen := f.sticky[l.Sticky]; !seen || !l.AcquiredAt.Before(ref.at) {
			f.sticky[l.Sticky] = stickyRef{proxy: proxy, at: l.AcquiredAt}
			f.trimSticky()
		}
	}
}

// SlotFreed forgets a held slot (released, expired, removed), returning what it held.
func (f *Fleet) SlotFreed(proxy string, slot int) (Slot, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxies[proxy]
	if p == nil {
		return Slot{}, false
	}
	old, held := p.dropSlot(slot)
	if held {
		f.noteHeld(p, old.Lease, -1)
	}
	f.changed(p)
	return old, held
}

// SlotFreedAt forgets slot of proxy if it holds revision rev (the shell's own release: the
// delete marker's revision is not returned, so rev is the lease's). known is false when the
// fleet knows nothing of proxy.
func (f *Fleet) SlotFreedAt(proxy string, slot int, rev uint64) (known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.proxies[proxy]
	if p == nil {
		return false
	}
	if s, held := p.slots[slot]; held && s.Rev == rev {
		p.dropSlot(slot)
		f.noteHeld(p, s.Lease, -1)
		f.changed(p)
	}
	return true
}

// trimSticky forgets the oldest tenth of the sticky memory once it is full. Callers hold mu.
func (f *Fleet) trimSticky() {
	if len(f.sticky) <= maxSticky {
		return
	}
	refs := slices.SortedFunc(maps.Keys(f.sticky), func(a, b string) int { return f.sticky[a].at.Compare(f.sticky[b].at) })
	for _, k := range refs[:len(refs)/10] {
		delete(f.sticky, k)
	}
}

// SetPoolCap sets the holder limit of pool's members (on: its leases.maxPerHolder) or drops it
// (the default applies again).
func (f *Fleet) SetPoolCap(pool string, limit int, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on {
		f.poolCaps[pool] = limit
	} else {
		delete(f.poolCaps, pool)
	}
}

// capFor is the holder limit on the proxies of pool; 0 is none. Callers hold mu.
func (f *Fleet) capFor(pool string) int {
	if c, ok := f.poolCaps[pool]; ok && pool != "" {
		return c
	}
	return f.defaultCap
}
