package selection

import (
	"cmp"
	"math/rand/v2"
	"time"

	"github.com/egressd/egressd/events"
)

// The lease order (DESIGN §3.5) is decided in this file and nowhere else. For one acquire:
//
//  1. Eligible proxies only: leasable (a valid spec not draining, phase Ready, an address),
//     a free slot below maxLeases, not cooling down for every target nor for the request's
//     target, every selector pair one of its attributes, at least minAnonymity by the
//     probers' verdict on its current instance, and not in a pool where the holder is at its
//     limit (Query.Capped). Each rule is one line of leasable, standing or Next.
//  2. The sticky key's proxy first: the one its session is bound to (Query.Prefer), or without
//     a session the proxy of the key's newest lease, if it is eligible.
//  3. Then the rest in the order of the request's strategy, compared by rank:
//     - balanced (the default): fewest active leases, least recently leased, lowest probe
//       latency (unknown last), name;
//     - round-robin: least recently leased, name — the next in turn whatever the load;
//     - lowest-latency: lowest latency (unknown last), then as balanced;
//     - random: the balanced order read from a random entry to its end, then from its start;
//     - best-for-target: by each proxy's recent success on the target, exploring proxies
//       without history there at a configured rate (best.go states it).
//     - packed: the balanced order read from its end: most active leases first (every
//       eligible proxy has a free slot), so the fewest proxies carry the leases and the
//       rest fall idle (an autoscaled pool drains only idle members).
//  4. Once an acquire has lost a Create race, the leading candidates that tie in all but the
//     name are shuffled (SpreadTies), so that replicas do not all go for the same next proxy.
//
// A strict session's proxy is judged on its own (SessionCandidate), and a refusal is explained
// by Availability. The shell tries the candidates in this order with one exception, which is
// about reaching the server and not about the proxy: a candidate whose lease shard is stalled
// (no stream leader) is passed over (workers/leaser/shards.go, decision 97).
//
// The index (index.go) only makes reading this order cheap: it keeps each selector's eligible
// proxies sorted by orderCompare, and select_property_test.go holds it to a plain sort by
// these rules. To change the order, change this file and that test's reference together.

// rank is where a proxy stands in the selection orders below the sticky preference, which
// depends on the request and is applied on top. It holds what every order compares; each
// order compares it its own way.
type rank struct {
	active     int
	lastLeased time.Time
	latencyMs  float64 // 0: unknown
	name       string
}

// The orders a selector's set keeps its eligible proxies in, one per strategy that needs an
// order of its own (random reads the balanced one at a random position).
const (
	orderBalanced   = iota // fewest active leases, least recently leased, lowest latency, name
	orderRoundRobin        // least recently leased, name: the next in turn whatever the load
	orderLatency           // lowest latency (unknown last), then as balanced
	numOrders
	// orderBest marks candidates read in the best-for-target order (best.go), which no set
	// keeps: it depends on the target.
	orderBest = numOrders
)

// orderCompare is the comparison of each order; every one ends with the name, so no two
// proxies are equal.
var orderCompare = [numOrders]func(a, b rank) int{
	orderBalanced:   rank.compare,
	orderRoundRobin: compareRoundRobin,
	orderLatency:    compareLatency,
}

func (a rank) compare(b rank) int {
	if c := a.tie(b); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// tie compares everything but the name: candidates it finds equal are equally good, which
// is where concurrent replicas should spread rather than all take the first by name.
func (a rank) tie(b rank) int {
	if c := cmp.Compare(a.active, b.active); c != 0 {
		return c
	}
	if c := a.lastLeased.Compare(b.lastLeased); c != 0 {
		return c
	}
	return compareLatencyOnly(a, b)
}

// compareLatencyOnly orders known latencies before unknown ones, lowest first.
func compareLatencyOnly(a, b rank) int {
	if (a.latencyMs == 0) != (b.latencyMs == 0) {
		if a.latencyMs == 0 {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.latencyMs, b.latencyMs)
}

func compareRoundRobin(a, b rank) int {
	if c := a.lastLeased.Compare(b.lastLeased); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

func compareLatency(a, b rank) int {
	if c := compareLatencyOnly(a, b); c != 0 {
		return c
	}
	return a.compare(b)
}

// rank is p's key in the orders.
func (p *proxyView) rank() rank {
	return rank{active: len(p.slots), lastLeased: p.lastLeased, latencyMs: p.latencyMs, name: p.name}
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
	_, credsKnown := p.creds.Auth()
	return p.hasSpec && !p.drain && p.hasStatus && p.phase == events.PhaseReady && p.ip != "" && p.port > 0 && credsKnown
}

// standing is how a proxy counts in every set it is a member of.
type standing struct {
	ready, full, coolingAll, eligible bool
	anon                              events.Anonymity // the verdict on the current instance; "" unknown
}

// standing is p's eligibility whatever the request: the target and minAnonymity are applied
// by Next on top (the latter through the per-level orders).
func (p *proxyView) standing() standing {
	st := standing{ready: p.leasable()}
	if st.ready {
		st.anon = p.anonymity()
		free := hasFreeSlot(p)
		st.full, st.coolingAll = !free, p.cooling[""]
		st.eligible = free && !st.coolingAll
	}
	return st
}

// Query is an acquire's selection request, with its selector's index key computed once.
type Query struct {
	selector       map[string]string
	key            string
	target, sticky string
	min            events.Anonymity // the acquire's minAnonymity; "" takes any
	strategy       events.Strategy  // "" is balanced
	session        bool             // the sticky key is a session (sessionSeconds)

	// Prefer is the proxy the session is bound to ("" while unbound), first instead of the
	// sticky key's last proxy.
	Prefer string
	// Capped are the pools where the acquire found its holder at its limit, with that limit:
	// their proxies are passed over without being tried, at the cost of a map lookup each.
	// The shell fills it as the acquire learns; Next reads it as it stands.
	Capped map[string]int
	// Avoid are neighbourhoods whose proxies are passed over (the holder already holds one
	// there for the target: Crowded), so that its leases spread; a sticky proxy is not.
	Avoid map[string]bool
	// Roll, uniform in [0, 1), decides whether a best-for-target acquire explores (best.go);
	// Now is when it scores the history. NewQuery draws the one and leaves the other zero.
	Roll float64
	Now  time.Time
}

// NewQuery is the selection request of r.
func NewQuery(r events.AcquireRequest) Query {
	return Query{selector: r.Selector, key: selectorKey(r.Selector), target: r.Target, sticky: r.Sticky, min: r.MinAnonymity,
		strategy: r.Strategy, session: r.SessionSeconds > 0, Roll: rand.Float64()}
}

// order is the set order the query's strategy reads.
func (q Query) order() int {
	switch q.strategy {
	case events.StrategyRoundRobin:
		return orderRoundRobin
	case events.StrategyLowestLatency:
		return orderLatency
	}
	return orderBalanced // balanced, random (from a random entry of it), packed (from its end)
}

// Cursor is how far an acquire has read the selection order; the zero value is the start.
type Cursor struct {
	stickyDone bool
	sticky     string // the proxy returned first as the sticky key's, not to be returned again
	after      *rank  // the last entry read from the ordered set; nil before the first
	// A random strategy reads from a random entry to the end, then from the start up to that
	// entry (start): uniform for the first candidate, every other one still reachable.
	started, wrapped, done bool
	start                  *rank
	// best-for-target (best.go): the proxies with history for the target not read yet,
	// scored once, whether this acquire explores, and which phase it is in.
	history scoredHeap
	explore bool
	phase   int
}

// Candidate is a proxy an acquire may try, with the slots the fleet believes free.
type Candidate struct {
	Name   string
	Free   []int // up to SlotsPerCandidate of the slots believed free, in random order
	Sticky bool  // first as the sticky key's (or session's) proxy
	// The pool it belongs to ("" none) and the limit of leases per holder there (0 none).
	Pool      string
	HolderCap int
	Basis     Basis // what a grant records it was made against
	Endpoint

	rank  rank
	order int // the order it was read in (rank.tie is the balanced order's)
}

// Next returns up to n eligible candidates for q, best first, after those cur has already
// read, leaving out the proxies in skip: the sticky key's proxy, then the selector's ordered
// set in the order of q's strategy (rules 1–3 above). With a minAnonymity it reads the set of
// those that meet it instead, kept in the same order, so a proxy below it is never read at
// all. A proxy cooling down for the target is passed over here rather than indexed per
// target, since targets are unbounded and most are never cooled. Its cost is that of the
// entries it reads, not of the fleet.
func (f *Fleet) Next(q Query, cur *Cursor, skip map[string]bool, n int) []Candidate {
	var out []Candidate
	f.withSet(q.selector, q.key, q.order(), func(s *selSet) {
		if !cur.stickyDone && q.sticky != "" {
			prev := q.Prefer
			if !q.session {
				prev = f.sticky[q.sticky].proxy
			}
			if p := f.proxies[prev]; p != nil && s.member(p) && p.ix.st.eligible && p.ix.st.anon.AtLeast(q.min) && !skip[prev] && !p.cooling[q.target] {
				out = append(out, f.candidate(p, true))
				cur.sticky = prev
			}
		}
		cur.stickyDone = true
		if q.usesBest() {
			out = f.nextBest(q, s, cur, out, n, func(p *proxyView) bool { return q.usable(p, s, cur, skip) })
			return
		}
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
			if !q.usable(p, s, cur, skip) {
				return true
			}
			c := f.candidate(p, false)
			c.order = q.order()
			out = append(out, c)
			return len(out) < n
		}
		read := t.ascend
		if q.strategy == events.StrategyPacked {
			read = t.descend // the balanced order from its end (cur.after: the last read)
		}
		for !cur.done && len(out) < n {
			if !read(cur.after, visit) {
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

// usable says whether p, an eligible member of s, may be returned to q now: not passed over
// by the acquire (skip, its sticky proxy), not cooling for the target, not in a neighbourhood
// it avoids nor a pool where its holder is capped. A proxy read outside the ordered sets
// (best-for-target's history) is also checked for eligibility and anonymity.
func (q Query) usable(p *proxyView, s *selSet, cur *Cursor, skip map[string]bool) bool {
	if !s.member(p) || !p.ix.st.eligible || !p.ix.st.anon.AtLeast(q.min) {
		return false
	}
	if skip[p.name] || p.name == cur.sticky || (q.target != "" && p.cooling[q.target]) || q.Avoid[p.hood] {
		return false
	}
	_, full := q.Capped[p.origin.Pool]
	return !full
}

// candidate is p as an acquire tries it. Callers hold mu.
func (f *Fleet) candidate(p *proxyView, sticky bool) Candidate {
	return Candidate{Name: p.name, Free: freeSlots(p, SlotsPerCandidate), rank: p.ix.rank, Sticky: sticky, Basis: p.basis(),
		Pool: p.origin.Pool, HolderCap: f.capFor(p.origin.Pool), Endpoint: p.endpoint()}
}

// SessionCandidate is the proxy a strict session is bound to as a candidate, or why it
// cannot be leased now (with its phase when it is not Ready): a strict session never moves,
// so its proxy is judged alone, by the eligibility rules, in this order of causes.
func (f *Fleet) SessionCandidate(q Query, name string) (Candidate, events.SessionCause, events.Phase) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[name]
	switch {
	case p == nil || !p.hasSpec:
		return Candidate{}, events.SessionProxyDeleted, ""
	case p.drain:
		return Candidate{}, events.SessionProxyDraining, ""
	case !p.leasable():
		return Candidate{}, events.SessionProxyNotReady, p.phase
	case !matches(p.attrs, q.selector):
		return Candidate{}, events.SessionProxyNotMatched, ""
	case !p.anonymity().AtLeast(q.min):
		return Candidate{}, events.SessionProxyBelowAnon, ""
	case p.cooling[""] || (q.target != "" && p.cooling[q.target]):
		return Candidate{}, events.SessionProxyCooling, ""
	case !hasFreeSlot(p):
		return Candidate{}, events.SessionProxyAtCapacity, ""
	}
	return f.candidate(p, true), "", ""
}

// SpreadTies shuffles the leading candidates that rank equal but for their names (rule 4). The
// shell uses it once an acquire has lost a Create race: replicas reading the same order would
// otherwise all go for the same next proxy, while a random one of equals costs nothing in
// fairness.
func SpreadTies(cs []Candidate) {
	if len(cs) < 2 || cs[0].Sticky || cs[0].order != orderBalanced {
		return
	}
	n := 1
	for n < len(cs) && !cs[n].Sticky && cs[n].rank.tie(cs[0].rank) == 0 {
		n++
	}
	rand.Shuffle(n, func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
}

// Learned is what one acquire learned from the server beyond the fleet: proxies whose every
// believed-free slot turned out taken, and cooldowns the fleet had not seen yet.
type Learned struct {
	Full          map[string]bool
	CoolingGlobal map[string]bool
	CoolingTarget map[string]bool
}

// NewLearned is an acquire's empty Learned.
func NewLearned() Learned {
	return Learned{Full: map[string]bool{}, CoolingGlobal: map[string]bool{}, CoolingTarget: map[string]bool{}}
}

// Availability explains a refusal from the fleet corrected by what the acquire learned. The
// counts are not a partition: a Ready proxy at capacity that also cools down counts in both,
// and BelowAnonymity counts Ready proxies whatever else holds them back.
// The selector's set holds the counters; only the proxies the acquire learned about and those
// cooling for the target are looked at one by one.
func (f *Fleet) Availability(q Query, a Learned) events.Availability {
	var av events.Availability
	f.withSet(q.selector, q.key, orderBalanced, func(s *selSet) {
		av = events.Availability{Matched: len(s.members), Ready: s.ready, AtCapacity: s.full, CoolingGlobal: s.coolingAll,
			BelowAnonymity: s.belowAnonymity(q.min)}
		// counts reports whether name is a Ready member of s that flag does not yet count.
		counts := func(name string, counted func(*proxyView) bool) bool {
			p := f.proxies[name]
			return p != nil && s.member(p) && p.ix.st.ready && !counted(p)
		}
		for name := range a.Full {
			if counts(name, func(p *proxyView) bool { return p.ix.st.full }) {
				av.AtCapacity++
			}
		}
		for name := range a.CoolingGlobal {
			if counts(name, func(p *proxyView) bool { return p.ix.st.coolingAll }) {
				av.CoolingGlobal++
			}
		}
		if q.target == "" {
			return
		}
		for p := range f.coolTarget[q.target] {
			if s.member(p) && p.ix.st.ready {
				av.CoolingTarget++
				// The first of them free again: when a waiting acquire may get one.
				if end := p.coolEnd[q.target]; !end.IsZero() && !p.ix.st.full && (av.NextAllowedAt.IsZero() || end.Before(av.NextAllowedAt)) {
					av.NextAllowedAt = end
				}
			}
		}
		for name := range a.CoolingTarget {
			if counts(name, func(p *proxyView) bool { return p.cooling[q.target] }) {
				av.CoolingTarget++
			}
		}
	})
	return av
}
