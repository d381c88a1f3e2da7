package selection

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/egressd/egressd/events"
)

// The index answers an acquire from structures the watches keep current, so its cost does not
// grow with the fleet (DESIGN §5.8): an index of proxies by attribute pair, and per distinct
// selector a set built on its first use from the smallest posting it names, holding the
// availability counters and the eligible members ordered by rank. Every change the fleet
// applies to a proxy is folded into the sets it belongs to as a difference (reindex).

// attrPair is one attribute of a spec, key and value.
type attrPair struct{ k, v string }

// selSet is the index of one distinct selector.
type selSet struct {
	selector map[string]string
	members  map[*proxyView]struct{} // a valid spec whose attributes match
	// Members by how they count in a refusal (DESIGN §3.5): leasable (Ready), of those the
	// ones without a free slot and the ones cooling down for every target, and the leasable
	// ones by anonymity verdict.
	ready, full, coolingAll int
	readyBy                 [levels]int
	// orders[o][0] holds the eligible members (leasable, a free slot, no global cooldown) in
	// order o (ranked.go); orders[o][1+i] the eligible ones at least minLevels[i] (anonymous,
	// elite) in the same order: an acquire with minAnonymity reads these, so it finds the one
	// elite proxy of a fleet at the cost of that one entry, not of the proxies it would pass
	// over. The balanced order is always kept; another is built on its strategy's first use
	// with this selector and kept from then on (kept), so a fleet that never asks for it
	// pays nothing for it.
	orders [numOrders][1 + len(minLevels)]ranked
	kept   [numOrders]bool
	used   atomic.Uint64
}

// maxSets bounds the selectors indexed at once; the least recently used set goes first and
// is rebuilt if it is asked for again. Crawlers use a handful of selectors, so this is a
// guard against a client sending a new selector with every request, not a working size.
const maxSets = 1024

// indexed is how the index currently accounts for a proxy, so a change can be applied as the
// difference between that and the proxy's new state.
type indexed struct {
	posted bool              // in f.specced and f.byAttr under attrs
	attrs  map[string]string // the attributes it is posted under
	sets   map[*selSet]struct{}
	st     standing
	rank   rank // its key in the eligible set of every member set while st.eligible
}

// selectorKey is the canonical name of a selector: its pairs sorted and quoted.
func selectorKey(sel map[string]string) string {
	if len(sel) == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(sel[k]))
		b.WriteByte(',')
	}
	return b.String()
}

// reindex folds whatever changed in p into the index. Callers hold mu for writing and call
// it after every change of p (changed does).
func (f *Fleet) reindex(p *proxyView) {
	ix := &p.ix
	if ix.posted != p.hasSpec || (p.hasSpec && !maps.Equal(ix.attrs, p.attrs)) {
		f.unpost(p)
		if p.hasSpec {
			f.post(p)
		}
	}
	st, rk := p.standing(), p.rank()
	if st == ix.st && (!st.eligible || rk.compare(ix.rank) == 0) {
		return
	}
	for s := range ix.sets {
		s.count(ix.st, -1)
		s.count(st, 1)
		s.remove(ix.st, ix.rank)
		s.add(st, rk, p)
	}
	ix.st, ix.rank = st, rk
}

func (s *selSet) count(st standing, d int) {
	if st.ready {
		s.ready += d
	}
	if st.full {
		s.full += d
	}
	if st.coolingAll {
		s.coolingAll += d
	}
	if st.ready {
		s.readyBy[level(st.anon)] += d
	}
}

// add enters p at rk into the ordered sets its standing puts it in.
func (s *selSet) add(st standing, rk rank, p *proxyView) {
	if !st.eligible {
		return
	}
	for o := range s.orders {
		if !s.kept[o] {
			continue
		}
		s.orders[o][0].insert(rk, p)
		for i, min := range minLevels {
			if st.anon.AtLeast(min) {
				s.orders[o][1+i].insert(rk, p)
			}
		}
	}
}

// remove undoes add.
func (s *selSet) remove(st standing, rk rank) {
	if !st.eligible {
		return
	}
	for o := range s.orders {
		if !s.kept[o] {
			continue
		}
		s.orders[o][0].delete(rk)
		for i, min := range minLevels {
			if st.anon.AtLeast(min) {
				s.orders[o][1+i].delete(rk)
			}
		}
	}
}

// post enters p under its attributes and into every indexed set it matches.
func (f *Fleet) post(p *proxyView) {
	ix := &p.ix
	ix.posted, ix.attrs = true, p.attrs
	f.specced[p] = struct{}{}
	for k, val := range p.attrs {
		pair := attrPair{k, val}
		m := f.byAttr[pair]
		if m == nil {
			m = map[*proxyView]struct{}{}
			f.byAttr[pair] = m
		}
		m[p] = struct{}{}
	}
	for _, s := range f.sets {
		if matches(p.attrs, s.selector) {
			f.join(s, p)
		}
	}
}

// unpost undoes post.
func (f *Fleet) unpost(p *proxyView) {
	ix := &p.ix
	if !ix.posted {
		return
	}
	for s := range ix.sets {
		f.leave(s, p)
	}
	delete(f.specced, p)
	for k, val := range ix.attrs {
		pair := attrPair{k, val}
		delete(f.byAttr[pair], p)
		if len(f.byAttr[pair]) == 0 {
			delete(f.byAttr, pair)
		}
	}
	ix.posted, ix.attrs = false, nil
}

func (f *Fleet) join(s *selSet, p *proxyView) {
	ix := &p.ix
	if ix.sets == nil {
		ix.sets = map[*selSet]struct{}{}
	}
	ix.sets[s] = struct{}{}
	s.members[p] = struct{}{}
	s.count(ix.st, 1)
	s.add(ix.st, ix.rank, p)
}

func (f *Fleet) leave(s *selSet, p *proxyView) {
	ix := &p.ix
	delete(ix.sets, s)
	delete(s.members, p)
	s.count(ix.st, -1)
	s.remove(ix.st, ix.rank)
}

// member reports whether p counts for s.
func (s *selSet) member(p *proxyView) bool {
	_, ok := p.ix.sets[s]
	return ok
}

// withSet runs use on the set of sel (whose key is key) keeping order o, building the set or
// the order first if this is their first use. use runs under mu, for reading unless something
// had to be built.
func (f *Fleet) withSet(sel map[string]string, key string, o int, use func(*selSet)) {
	f.mu.RLock()
	if s := f.sets[key]; s != nil && s.kept[o] {
		s.used.Store(f.clock.Add(1))
		defer f.mu.RUnlock()
		use(s)
		return
	}
	f.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[key]
	if s == nil {
		s = f.buildSet(sel, key)
	}
	if !s.kept[o] {
		s.keep(o)
	}
	s.used.Store(f.clock.Add(1))
	use(s)
}

// keep builds order o of s from its eligible members and keeps it from then on. Callers hold
// mu for writing.
func (s *selSet) keep(o int) {
	s.kept[o] = true
	for p := range s.members {
		if st := p.ix.st; st.eligible {
			s.orders[o][0].insert(p.ix.rank, p)
			for i, min := range minLevels {
				if st.anon.AtLeast(min) {
					s.orders[o][1+i].insert(p.ix.rank, p)
				}
			}
		}
	}
}

// buildSet indexes a new selector from the smallest posting among its pairs (every proxy with
// a spec for the empty selector). Callers hold mu for writing.
func (f *Fleet) buildSet(sel map[string]string, key string) *selSet {
	s := &selSet{selector: maps.Clone(sel), members: map[*proxyView]struct{}{}}
	s.kept[orderBalanced] = true
	for o := range s.orders {
		for i := range s.orders[o] {
			s.orders[o][i].by = o
		}
	}
	pool := f.specced
	for k, val := range sel {
		if m := f.byAttr[attrPair{k, val}]; len(m) < len(pool) {
			pool = m
		}
	}
	for p := range pool {
		if matches(p.attrs, sel) {
			f.join(s, p)
		}
	}
	if len(f.sets) >= maxSets {
		f.evictSet()
	}
	f.sets[key] = s
	return s
}

// evictSet drops the least recently used set. Callers hold mu for writing.
func (f *Fleet) evictSet() {
	var oldKey string
	var old *selSet
	for k, s := range f.sets {
		if old == nil || s.used.Load() < old.used.Load() {
			oldKey, old = k, s
		}
	}
	for p := range old.members {
		delete(p.ix.sets, old)
	}
	delete(f.sets, oldKey)
}

// noteTargetCooling keeps f.coolTarget, the proxies cooling down per target, which makes a
// refusal's count for one target cost the proxies cooling for it rather than the fleet.
// Callers hold mu for writing.
func (f *Fleet) noteTargetCooling(p *proxyView, target string, on bool) {
	m := f.coolTarget[target]
	if on {
		if m == nil {
			m = map[*proxyView]struct{}{}
			f.coolTarget[target] = m
		}
		m[p] = struct{}{}
		return
	}
	delete(m, p)
	if len(m) == 0 {
		delete(f.coolTarget, target)
	}
}

// minLevels are the minAnonymity values an acquire may ask for; each has an ordered set of
// the eligible proxies that meet it in every selector's set (selSet.orders).
var minLevels = [...]events.Anonymity{events.AnonymityAnonymous, events.AnonymityElite}

// levels counts the verdicts a set tallies its Ready members by: unknown and each verdict.
const levels = 1 + 3

// level is the index of a verdict in selSet.readyBy: 0 unknown, then events.Anonymities'.
func level(a events.Anonymity) int {
	for i, v := range events.Anonymities {
		if a == v {
			return i + 1
		}
	}
	return 0
}

// order is the ordered set an acquire with minAnonymity min reads in order o.
func (s *selSet) order(o int, min events.Anonymity) *ranked {
	for i, m := range minLevels {
		if m == min {
			return &s.orders[o][1+i]
		}
	}
	return &s.orders[o][0]
}

// belowAnonymity counts the Ready members less anonymous than min, unknown included.
func (s *selSet) belowAnonymity(min events.Anonymity) int {
	if min == "" {
		return 0
	}
	n := s.readyBy[0]
	for i, a := range events.Anonymities {
		if !a.AtLeast(min) {
			n += s.readyBy[i+1]
		}
	}
	return n
}
