package leaser

import (
	"math/rand/v2"

	"github.com/egressd/egressd/events"
)

// candidate is a proxy an acquire may try, with the slots the view believes free.
type candidate struct {
	name   string
	free   []int // a few of the slots the view believes free, in random order
	rank   rank
	sticky bool
	basis  basis // what a grant records it was made against
	endpoint
}

// query is an acquire's selection request, with its selector's index key computed once.
type query struct {
	selector       map[string]string
	key            string
	target, sticky string
	min            events.Anonymity // the acquire's minAnonymity; "" takes any
}

func newQuery(selector map[string]string, target, sticky string, min events.Anonymity) query {
	return query{selector: selector, key: selectorKey(selector), target: target, sticky: sticky, min: min}
}

// cursor is how far an acquire has read the selection order.
type cursor struct {
	stickyDone bool
	sticky     string // the proxy returned first as the sticky key's, not to be returned again
	after      *rank  // the last entry read from the ordered set; nil before the first
}

// matches is the exact attribute match of DESIGN §3.5: every selector pair is an attribute.
func matches(attrs, selector map[string]string) bool {
	for k, want := range selector {
		if got, ok := attrs[k]; !ok || got != want {
			return false
		}
	}
	return true
}

// leasable reports whether p can be handed out at all: a valid spec not draining, phase Ready
// and an address. The spec's drain is checked as well as the phase (the reconciler turns it
// into Draining), so that no grant lands between the spec's change and the status's.
func (p *proxyView) leasable() bool {
	return p.hasSpec && !p.drain && p.hasStatus && p.phase == events.PhaseReady && p.ip != "" && p.port > 0
}

// next returns up to n eligible candidates for q, best first, after those cur has already
// read, leaving out the proxies in skip: the sticky key's previous proxy first, then the
// selector's ordered set (fewest active leases, least recently leased, lowest probe latency,
// name). With a minAnonymity it reads the set of those that meet it instead, kept in the same
// order, so a proxy below it is never read at all. A proxy cooling down for the target is
// passed over here rather than indexed per target, since targets are unbounded and most are
// never cooled. Its cost is that of the entries it reads, not of the fleet.
func (v *view) next(q query, cur *cursor, skip map[string]bool, n int) []candidate {
	var out []candidate
	v.withSet(q.selector, q.key, func(s *selSet) {
		if !cur.stickyDone && q.sticky != "" {
			prev := v.sticky[q.sticky].proxy
			if p := v.proxies[prev]; p != nil && s.member(p) && p.ix.st.eligible && p.ix.st.anon.AtLeast(q.min) && !skip[prev] && !p.cooling[q.target] {
				out = append(out, p.candidate(true))
				cur.sticky = prev
			}
		}
		cur.stickyDone = true
		s.order(q.min).ascend(cur.after, func(k rank, p *proxyView) bool {
			cur.after = &k
			if skip[p.name] || p.name == cur.sticky || (q.target != "" && p.cooling[q.target]) {
				return true
			}
			out = append(out, p.candidate(false))
			return len(out) < n
		})
	})
	return out
}

// candidate is p as an acquire tries it. Callers hold mu.
func (p *proxyView) candidate(sticky bool) candidate {
	return candidate{name: p.name, free: freeSlots(p, slotsPerCandidate), rank: p.ix.rank, sticky: sticky, basis: p.basis(), endpoint: p.endpoint()}
}

// spreadTies shuffles the leading candidates that rank equal but for their names. It is used
// once an acquire has lost a Create race: replicas reading the same order would otherwise
// all go for the same next proxy, while a random one of equals costs nothing in fairness.
func spreadTies(cs []candidate) {
	if len(cs) < 2 || cs[0].sticky {
		return
	}
	n := 1
	for n < len(cs) && !cs[n].sticky && cs[n].rank.tie(cs[0].rank) == 0 {
		n++
	}
	rand.Shuffle(n, func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
}

// attempt is what one acquire learned from the server beyond the view: proxies whose every
// believed-free slot turned out taken, and cooldowns the view had not seen yet.
type attempt struct {
	full          map[string]bool
	coolingGlobal map[string]bool
	coolingTarget map[string]bool
}

func newAttempt() *attempt {
	return &attempt{full: map[string]bool{}, coolingGlobal: map[string]bool{}, coolingTarget: map[string]bool{}}
}

// availability explains a refusal from the view corrected by what the attempt learned. The
// counts are not a partition: a Ready proxy at capacity that also cools down counts in both,
// and BelowAnonymity counts Ready proxies whatever else holds them back.
// The selector's set holds the counters; only the proxies the attempt learned about and those
// cooling for the target are looked at one by one.
func (v *view) availability(q query, a *attempt) events.Availability {
	var av events.Availability
	v.withSet(q.selector, q.key, func(s *selSet) {
		av = events.Availability{Matched: len(s.members), Ready: s.ready, AtCapacity: s.full, CoolingGlobal: s.coolingAll,
			BelowAnonymity: s.belowAnonymity(q.min)}
		// counts reports whether name is a Ready member of s that flag does not yet count.
		counts := func(name string, counted func(*proxyView) bool) bool {
			p := v.proxies[name]
			return p != nil && s.member(p) && p.ix.st.ready && !counted(p)
		}
		for name := range a.full {
			if counts(name, func(p *proxyView) bool { return p.ix.st.full }) {
				av.AtCapacity++
			}
		}
		for name := range a.coolingGlobal {
			if counts(name, func(p *proxyView) bool { return p.ix.st.coolingAll }) {
				av.CoolingGlobal++
			}
		}
		if q.target == "" {
			return
		}
		for p := range v.coolTarget[q.target] {
			if s.member(p) && p.ix.st.ready {
				av.CoolingTarget++
			}
		}
		for name := range a.coolingTarget {
			if counts(name, func(p *proxyView) bool { return p.cooling[q.target] }) {
				av.CoolingTarget++
			}
		}
	})
	return av
}

// hasFreeSlot reports whether a slot below maxLeases is free; slots held above a shrunk
// maxLeases do not count, and maxLeases 0 has none.
func hasFreeSlot(p *proxyView) bool { return p.maxLeases-p.held > 0 }

// slotsPerCandidate bounds the Creates one acquire spends on one proxy: if that many slots the
// view thought free are taken, the view is far behind and the next proxy is a better bet.
const slotsPerCandidate = 8

// freeSlots returns up to limit free slots of p in random order, so that replicas racing for
// one proxy spread over its slots. Its cost does not grow with maxLeases (up to 10,000) while
// a quarter of the slots are free.
func freeSlots(p *proxyView, limit int) []int {
	free := p.maxLeases - p.held
	if free <= 0 {
		return nil
	}
	var out []int
	if p.maxLeases <= 4*limit || 4*free < p.maxLeases {
		for s := range p.maxLeases {
			if _, held := p.slots[s]; !held {
				out = append(out, s)
			}
		}
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:min(len(out), limit)]
	}
	picked := map[int]bool{}
	for len(out) < min(limit, free) {
		s := rand.IntN(p.maxLeases)
		if _, held := p.slots[s]; !held && !picked[s] {
			picked[s] = true
			out = append(out, s)
		}
	}
	return out
}
