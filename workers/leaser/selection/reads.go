package selection

import (
	"slices"
	"strings"
)

// Reads of what the fleet knows of one proxy, for the shell's renewals, releases, probes,
// statistics and leftovers. None of them ranks anything.

// Endpoint returns the connection details of proxy, and whether slot is still within its
// maxLeases (a shrunk maxLeases lets the slots above it drain); known is false without a
// valid spec.
func (f *Fleet) Endpoint(proxy string, slot int) (e Endpoint, known, inRange bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil || !p.hasSpec {
		return Endpoint{}, false, false
	}
	return p.endpoint(), true, slot < p.maxLeases
}

// Origin is proxy's provider and pool as its spec last said (zero if unknown).
func (f *Fleet) Origin(proxy string) Origin {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if p := f.proxies[proxy]; p != nil {
		return p.origin
	}
	return Origin{}
}

// Slot returns what slot of proxy holds, if the fleet holds it.
func (f *Fleet) Slot(proxy string, slot int) (Slot, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil {
		return Slot{}, false
	}
	s, held := p.slots[slot]
	return s, held
}

// Heard returns what the fleet last heard of proxy's spec and status; false if it knows
// nothing of it.
func (f *Fleet) Heard(proxy string) (Heard, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil {
		return Heard{}, false
	}
	return p.heard(), true
}

// HeldSlots calls fn with every slot of proxy the fleet holds, in no order, each with what the
// fleet heard of the proxy (as Heard returns it). fn runs under the fleet's read lock: it must
// not call the fleet.
func (f *Fleet) HeldSlots(proxy string, fn func(h Heard, s Slot)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil {
		return
	}
	h := p.heard()
	for _, s := range p.slots {
		fn(h, s)
	}
}

// Names returns the proxies the fleet knows of, in no order.
func (f *Fleet) Names() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]string, 0, len(f.proxies))
	for name := range f.proxies {
		out = append(out, name)
	}
	return out
}

// Held counts the lease slots held on the members of each pool, and on the proxies in no pool
// that each selector of sels (by scope) matches: the demand records' held (demand.go). One
// pass over the fleet, at most once per publish interval.
func (f *Fleet) Held(sels map[string]map[string]string) (byPool, bySel map[string]int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	byPool, bySel = map[string]int{}, map[string]int{}
	for _, p := range f.proxies {
		n := len(p.slots)
		if n == 0 {
			continue
		}
		if p.origin.Pool != "" {
			byPool[p.origin.Pool] += n
			continue
		}
		for scope, sel := range sels {
			if p.hasSpec && matches(p.attrs, sel) {
				bySel[scope] += n
			}
		}
	}
	return byPool, bySel
}

// Matches is the exact attribute match of an acquire's selector (DESIGN §3.5), for the shell's
// judgement of which pools a selector can match (demand.go).
func Matches(attrs, selector map[string]string) bool { return matches(attrs, selector) }

// FullProxy is a leasable proxy without a free slot, and how many slots it holds.
type FullProxy struct {
	Name string
	Held int
}

// Full lists the leasable proxies without a free slot that keep accepts, by name: where an
// acquire finds nothing, and so where a release the view missed would matter (the shell
// reads these again while a lease shard's watch stands still, fresh.go).
func (f *Fleet) Full(keep func(name string) bool) []FullProxy {
	f.mu.RLock()
	var out []FullProxy
	for name, p := range f.proxies {
		if p.ix.st.ready && p.ix.st.full && keep(name) {
			out = append(out, FullProxy{Name: name, Held: len(p.slots)})
		}
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b FullProxy) int { return strings.Compare(a.Name, b.Name) })
	return out
}
