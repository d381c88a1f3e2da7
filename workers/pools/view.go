package pools

import (
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// view is what the watches delivered: the pools, which proxies exist and whose, where they
// run (for least-loaded spreading) and their phases. It only finds work and feeds a pass;
// the pass reads the ledger itself and every write is a compare-and-set, so a view that lags
// costs a retry, never a wrong count.
type view struct {
	mu      sync.Mutex
	pools   map[string]poolEntry
	ledgers map[string]bool // pools with a record in pool_status
	proxies map[string]proxyEntry
	// gone holds, for a spec this controller deleted, the revision it deleted: a put the
	// watch still delivers at or below it is from before the delete, not the spec back.
	gone    map[string]uint64
	byOwner map[string]map[string]bool // pool → the names of the specs naming it
	load    map[[2]string]int          // (provider, zone) → specs there, for least-loaded
	phases  map[string]events.Phase
	limited map[string]string        // statuses that wait for their provider's instance limit
	expiry  map[string]expiry        // statuses whose instance has a lifetime
	stuck   map[string]stuck         // statuses that wait for quota or a failing provider target
	boots   map[string]time.Duration // statuses Ready at least once: put to first Ready
	// outdated: statuses whose instance the reconciler found outdated (status.rollout)
	outdated map[string]events.Reason
	dirty    map[string]bool
	wake     chan struct{}
	demand   map[string]map[string]events.PoolDemand // pool → pool_demand key → record (demand.go)
	// addrs: where each status says its proxy is, for the quarantine (quarantinepass.go)
	addrs map[string]statusAddr
	// catalog is provider_catalog as the reconciler reads it: a pool whose members the
	// reconciler would refuse (an unknown provider, a zone that is not a host) creates none.
	catalog schemas.Catalog
}

type poolEntry struct {
	rev  uint64
	spec *schemas.PoolSpec
	err  error
}

type proxyEntry struct {
	rev            uint64
	owner          string // the pool it names, if any
	spec           *schemas.ProxySpec
	provider, zone string
}

func newView() *view {
	return &view{pools: map[string]poolEntry{}, ledgers: map[string]bool{}, proxies: map[string]proxyEntry{},
		gone: map[string]uint64{}, byOwner: map[string]map[string]bool{}, load: map[[2]string]int{}, phases: map[string]events.Phase{}, limited: map[string]string{}, expiry: map[string]expiry{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1),
		stuck: map[string]stuck{}, boots: map[string]time.Duration{}, outdated: map[string]events.Reason{},
		demand:  map[string]map[string]events.PoolDemand{},
		addrs:   map[string]statusAddr{},
		catalog: schemas.Catalog{}}
}

func isPut(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValuePut }

// mark queues pool for a pass and wakes the loop; v.mu is held.
func (v *view) mark(pool string) {
	if pool == "" {
		return
	}
	v.dirty[pool] = true
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

func (v *view) applyPool(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	name := e.Key()
	if !isPut(e) {
		delete(v.pools, name)
		v.mark(name)
		return
	}
	v.pools[name] = parsePool(name, e)
	v.mark(name)
}

// applyCatalog follows provider_catalog as the reconciler does (an unreadable record is
// skipped, as there); every pool is looked at again, since any may name the provider.
func (v *view) applyCatalog(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !isPut(e) {
		delete(v.catalog, e.Key())
	} else {
		var rec events.CatalogRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			return
		}
		var entry schemas.CatalogEntry
		for _, h := range rec.Hosts {
			entry.Hosts = append(entry.Hosts, h.Name)
		}
		v.catalog[e.Key()] = entry
	}
	for n := range v.pools {
		v.mark(n)
	}
}

// catalogCopy is the catalog as it is now, for one pass.
func (v *view) catalogCopy() schemas.Catalog {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.catalog)
}

// parsePool parses a pool's entry; a bad name or spec is its error.
func parsePool(name string, e jetstream.KeyValueEntry) poolEntry {
	pe := poolEntry{rev: e.Revision()}
	if err := schemas.ValidPoolName(name); err != nil {
		pe.err = &schemas.FieldError{Field: "(name)", Problem: err.Error()}
	} else if s, err := schemas.ParsePoolSpec(e.Value()); err != nil {
		pe.err = err
	} else {
		pe.spec = &s
	}
	return pe
}

func (v *view) applyLedger(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if isPut(e) {
		v.ledgers[e.Key()] = true
	} else {
		delete(v.ledgers, e.Key())
	}
	v.mark(e.Key())
}

// ownerOnly is what is read of every spec: members are few, the fleet is large, and only a
// spec that names a pool is parsed whole.
type ownerOnly struct {
	Pool      string `json:"pool"`
	Provider  string `json:"provider"`
	Placement struct {
		Zone string `json:"zone"`
	} `json:"placement"`
}

func (v *view) applyProxy(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	name := e.Key()
	old, known := v.proxies[name]
	if !isPut(e) {
		delete(v.gone, name)
		v.forget(name)
		v.mark(old.owner)
		return
	}
	// The watch may deliver a put after the controller folded in its own later write
	// (notePut) or its delete (noteDelete): an older revision is not news.
	if (known && e.Revision() <= old.rev) || e.Revision() <= v.gone[name] {
		return
	}
	pe := v.decodeProxy(e.Value())
	pe.rev = e.Revision()
	v.set(name, pe)
	v.mark(old.owner)
	v.mark(pe.owner)
}

// set records a spec and keeps the indexes; v.mu is held.
func (v *view) set(name string, pe proxyEntry) {
	v.forget(name)
	v.proxies[name] = pe
	v.load[[2]string{pe.provider, pe.zone}]++
	if pe.owner != "" {
		if v.byOwner[pe.owner] == nil {
			v.byOwner[pe.owner] = map[string]bool{}
		}
		v.byOwner[pe.owner][name] = true
	}
}

// forget removes a spec and its index entries; v.mu is held.
func (v *view) forget(name string) {
	old, ok := v.proxies[name]
	if !ok {
		return
	}
	delete(v.proxies, name)
	k := [2]string{old.provider, old.zone}
	if v.load[k]--; v.load[k] <= 0 {
		delete(v.load, k)
	}
	if m := v.byOwner[old.owner]; m != nil {
		delete(m, name)
		if len(m) == 0 {
			delete(v.byOwner, old.owner)
		}
	}
}

func (v *view) decodeProxy(b []byte) proxyEntry {
	var o ownerOnly
	_ = json.Unmarshal(b, &o)
	pe := proxyEntry{owner: o.Pool, provider: o.Provider, zone: o.Placement.Zone}
	if o.Pool != "" {
		if s, err := schemas.ParseProxySpec(b); err == nil {
			pe.spec = &s
		}
	}
	return pe
}

// notePut folds the controller's own write in at once, so that the next pass does not act
// on the state before it.
func (v *view) notePut(name string, b []byte, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.proxies[name]; ok && cur.rev >= rev {
		return
	}
	pe := v.decodeProxy(b)
	pe.rev = rev
	v.set(name, pe)
}

// noteDelete folds in the controller's own delete of the spec it knew at rev.
func (v *view) noteDelete(name string, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gone[name] = max(v.gone[name], rev)
	v.forget(name)
}

type phaseOnly struct {
	Phase       events.Phase    `json:"phase"`
	Reason      events.Reason   `json:"reason"`
	Message     string          `json:"message"`
	ProvisionAt time.Time       `json:"provisionAt"`
	ExpiresAt   time.Time       `json:"expiresAt"`
	RetryAt     time.Time       `json:"retryAt"`
	CreatedAt   time.Time       `json:"createdAt"`
	ReadyAt     time.Time       `json:"readyAt"`
	Rollout     *events.Rollout `json:"rollout"`
	// Where it is, for the quarantine of burned addresses.
	IP             string    `json:"ip"`
	Port           int       `json:"port"`
	ExpectedEgress string    `json:"expectedEgress"`
	AddressAt      time.Time `json:"addressAt"`
}

func (v *view) applyStatus(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	name := e.Key()
	var st phaseOnly
	delete(v.limited, name)
	delete(v.expiry, name)
	delete(v.stuck, name)
	delete(v.boots, name)
	delete(v.outdated, name)
	delete(v.addrs, name)
	if !isPut(e) || json.Unmarshal(e.Value(), &st) != nil {
		delete(v.phases, name)
	} else {
		if s, ok := stuckOf(st); ok {
			v.stuck[name] = s
		}
		if b, ok := bootOf(st); ok {
			v.boots[name] = b
		}
		v.phases[name] = st.Phase
		if st.Reason == events.ReasonLimitReached {
			v.limited[name] = st.Message
		}
		if !st.ExpiresAt.IsZero() {
			v.expiry[name] = expiry{from: st.ProvisionAt, until: st.ExpiresAt}
		}
		if st.Rollout != nil {
			v.outdated[name] = st.Rollout.Reason
		}
		v.addrs[name] = statusAddr{ip: st.IP, port: st.Port, expected: st.ExpectedEgress, since: st.AddressAt}
	}
	if pe, ok := v.proxies[name]; ok {
		v.mark(pe.owner)
	}
}

// names is every pool with a spec, a record or a member, so a deleted pool's members go too.
func (v *view) names() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	set := map[string]bool{}
	for n := range v.pools {
		set[n] = true
	}
	for n := range v.ledgers {
		set[n] = true
	}
	for n := range v.byOwner {
		set[n] = true
	}
	return sortedKeys(set)
}

// takeDirty returns the pools marked since the last call.
func (v *view) takeDirty() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := sortedKeys(v.dirty)
	clear(v.dirty)
	return out
}

// snapshot is what a pass of pool reads from the view.
type snapshot struct {
	owned   map[string]owned
	phases  map[string]events.Phase
	limited map[string]string
	expiry  map[string]expiry
	stuck   map[string]stuck
	boots   map[string]time.Duration
	// outdated: members whose instance the reconciler found outdated (status.rollout), by why
	outdated map[string]events.Reason
}

// snapshot costs what the pool's members do, not what the fleet does: the specs come from the
// owner index, the load from counts kept as specs change.
func (v *view) snapshot(pool string, ledger *events.PoolStatus) snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := snapshot{owned: map[string]owned{}, phases: map[string]events.Phase{}, limited: map[string]string{}, expiry: map[string]expiry{},
		stuck: map[string]stuck{}, boots: map[string]time.Duration{}, outdated: map[string]events.Reason{}}
	for name := range v.byOwner[pool] {
		p := v.proxies[name]
		s.owned[name] = owned{rev: p.rev, spec: p.spec}
		s.phases[name] = v.phases[name]
		if msg, ok := v.limited[name]; ok {
			s.limited[name] = msg
		}
		if e, ok := v.expiry[name]; ok {
			s.expiry[name] = e
		}
		if st, ok := v.stuck[name]; ok {
			s.stuck[name] = st
		}
		if b, ok := v.boots[name]; ok {
			s.boots[name] = b
		}
		if why, ok := v.outdated[name]; ok {
			s.outdated[name] = why
		}
	}
	if ledger != nil {
		for _, m := range ledger.Members {
			s.phases[m.Name] = v.phases[m.Name]
			if m.Successor != "" {
				s.phases[m.Successor] = v.phases[m.Successor]
			}
		}
	}
	return s
}

// loadAt is how many specs of the fleet run on provider and zone.
func (v *view) loadAt(provider, zone string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.load[[2]string{provider, zone}]
}

// window is how far back block reports matter: the longest recycle window of the pools
// (DefaultRecycleWindow when none recycles). A pool given a longer window later counts from
// the reports since the controller started leading.
func (v *view) window() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	w := schemas.DefaultRecycleWindow
	for _, p := range v.pools {
		if p.spec != nil && p.spec.Recycle != nil {
			w = max(w, p.spec.Recycle.WindowSeconds)
		}
	}
	return time.Duration(w) * time.Second
}

func (v *view) taken(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.proxies[name]
	return ok
}
