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
	order  int // the order it was read in (rank.tie is the balanced order's)
	// The pool it belongs to ("" none) and the limit of leases per holder there (0 none).
	pool      string
	holderCap int
	basis     basis // what a grant records it was made against
	endpoint
}

// query is an acquire's selection request, with its selector's index key computed once.
type query struct {
	selector       map[string]string
	key            string
	target, sticky string
	min            events.Anonymity // the acquire's minAnonymity; "" takes any
	strategy       events.Strategy  // "" is balanced
	// session: the sticky key is a session (sessionSeconds); prefer is the proxy it is bound
	// to ("" while unbound) instead of the key's last proxy in the view.
	session bool
	prefer  string
	// capped are the pools where the acquire found its holder at its limit (the attempt's
	// holderFull): their proxies are passed over without being tried, at the cost of a map
	// lookup each.
	holder string
	capped map[holdScope]int
}

func newQuery(r events.AcquireRequest) query {
	return query{selector: r.Selector, key: selectorKey(r.Selector), target: r.Target, sticky: r.Sticky, min: r.MinAnonymity,
		strategy: r.Strategy, session: r.SessionSeconds > 0, holder: r.Holder}
}

// order is the set order the query's strategy reads.
func (q query) order() int {
	switch q.strategy {
	case events.StrategyRoundRobin:
		return orderRoundRobin
	case events.StrategyLowestLatency:
		return orderLatency
	}
	return orderBalanced // balanced, and random, which starts at a random entry of it
}

// cursor is how far an acquire has read the selection order.
type cursor struct {
	stickyDone bool
	sticky     string // the proxy returned first as the sticky key's, not to be returned again
	after      *rank  // the last entry read from the ordered set; nil before the first
	// A random strategy reads from a random entry to the end, then from the start up to that
	// entry (start): uniform for the first candidate, every other one still reachable.
	started, wrapped, done bool
	start                  *rank
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
// read, leaving out the proxies in skip: the sticky key's proxy first (its session's, or the
// proxy of its last lease), then the selector's ordered set in the order of q's strategy
// (balanced: fewest active leases, least recently leased, lowest probe latency, name). With a
// minAnonymity it reads the set of those that meet it instead, kept in the same order, so a
// proxy below it is never read at all. A proxy cooling down for the target is passed over
// here rather than indexed per target, since targets are unbounded and most are never
// cooled. Its cost is that of the entries it reads, not of the fleet.
func (v *view) next(q query, cur *cursor, skip map[string]bool, n int) []candidate {
	var out []candidate
	v.withSet(q.selector, q.key, q.order(), func(s *selSet) {
		if !cur.stickyDone && q.sticky != "" {
			prev := q.prefer
			if !q.session {
				prev = v.sticky[q.sticky].proxy
			}
			if p := v.proxies[prev]; p != nil && s.member(p) && p.ix.st.eligible && p.ix.st.anon.AtLeast(q.min) && !skip[prev] && !p.cooling[q.target] {
				out = append(out, p.candidate(true, v.capFor(p.origin.pool)))
				cur.sticky = prev
			}
		}
		cur.stickyDone = true
		t := s.order(q.order(), q.min)
		if q.strategy == events.StrategyRandom && !cur.started {
			cur.started = true
			if k := t.len(); k > 0 {
				if i := rand.IntN(k); i > 0 {
					after, start := t.nth(i-1), t.nth(i)
					cur.after, cur.start = &after, &start
				}
			}
		}
		visit := func(k rank, p *proxyView) bool {
			if cur.wrapped && t.cmp(k, *cur.start) >= 0 {
				cur.done = true // back where the random read began
				return false
			}
			cur.after = &k
			if skip[p.name] || p.name == cur.sticky || (q.target != "" && p.cooling[q.target]) {
				return true
			}
			if _, full := q.capped[holdScope{pool: p.origin.pool, holder: q.holder}]; full {
				return true
			}
			c := p.candidate(false, v.capFor(p.origin.pool))
			c.order = q.order()
			out = append(out, c)
			return len(out) < n
		}
		for !cur.done && len(out) < n {
			if !t.ascend(cur.after, visit) {
				continue // n read, or back at the start
			}
			if cur.start == nil || cur.wrapped {
				break // at the end; a later call reads what was added after the cursor
			}
			cur.wrapped, cur.after = true, nil
		}
	})
	return out
}

// candidate is p as an acquire tries it. Callers hold mu.
func (p *proxyView) candidate(sticky bool, holderCap int) candidate {
	return candidate{name: p.name, free: freeSlots(p, slotsPerCandidate), rank: p.ix.rank, sticky: sticky, basis: p.basis(),
		pool: p.origin.pool, holderCap: holderCap, endpoint: p.endpoint()}
}

// spreadTies shuffles the leading candidates that rank equal but for their names. It is used
// once an acquire has lost a Create race: replicas reading the same order would otherwise
// all go for the same next proxy, while a random one of equals costs nothing in fairness.
func spreadTies(cs []candidate) {
	if len(cs) < 2 || cs[0].sticky || cs[0].order != orderBalanced {
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
// It also carries the holder slot it took (holders.go) until a grant uses it, the scopes where
// the holder turned out to be at its limit (with that limit), and the candidates passed over
// for it.
type attempt struct {
	full          map[string]bool
	coolingGlobal map[string]bool
	coolingTarget map[string]bool
	holderFull    map[holdScope]int
	capped        map[string]bool
	hold          *hold
}

func newAttempt() *attempt {
	return &attempt{full: map[string]bool{}, coolingGlobal: map[string]bool{}, coolingTarget: map[string]bool{},
		holderFull: map[holdScope]int{}, capped: map[string]bool{}}
}

// availability explains a refusal from the view corrected by what the attempt learned. The
// counts are not a partition: a Ready proxy at capacity that also cools down counts in both,
// and BelowAnonymity counts Ready proxies whatever else holds them back.
// The selector's set holds the counters; only the proxies the attempt learned about and those
// cooling for the target are looked at one by one.
func (v *view) availability(q query, a *attempt) events.Availability {
	var av events.Availability
	v.withSet(q.selector, q.key, orderBalanced, func(s *selSet) {
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
	return freeCounted(p.maxLeases, p.held, func(s int) bool { _, held := p.slots[s]; return held }, limit)
}
