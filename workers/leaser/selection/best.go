package selection

import (
	"cmp"
	"container/heap"
	"math"
	"time"

	"github.com/egressd/egressd/events"
)

// The best-for-target strategy (docs/leases.md#best-for-target) orders an acquire's candidates
// by what each did lately for the acquire's target. The fleet remembers, per target and proxy,
// the grants and the ok and blocked reports the shell fed it (Outcome), each count halved
// every half-life, and scores a proxy by
//
//	trials    = max(grants, ok + blocked)   (a lease not reported blocked counts as a success)
//	successes = trials − blocked
//	score     = (successes + 1) / (trials + 2)
//
// which is ½ for a proxy without history and moves toward its success rate as evidence comes
// in. An acquire then reads, by its roll (Query.Roll, uniform in [0, 1)):
//
//   - exploiting (roll ≥ explore): the proxies scoring above ½, best first; then those
//     without history in the balanced order; then the rest, best first;
//   - exploring (roll < explore): those without history first, then as when exploiting.
//
// Ties in the score go in the balanced order. A share 1−explore of the acquires thus gets the
// best free proxy for the target, and a share explore one it has not tried.

// outcome is what one proxy did for one target lately: counts decayed to at.
type outcome struct {
	granted, ok, blocked float64
	at                   time.Time
}

// Learning configures best-for-target: how fast history fades and how often an acquire
// explores.
type Learning struct {
	HalfLife time.Duration // a count weighs half after this long; 0: DefaultHalfLife
	Explore  float64       // the share of acquires that try a proxy without history first
}

// Defaults of best-for-target.
const (
	DefaultHalfLife = time.Hour
	DefaultExplore  = 0.1
	// maxOutcomes bounds the (target, proxy) pairs remembered; past it faded ones are
	// dropped, and while none has faded a new pair is not recorded.
	maxOutcomes = 100_000
	// faded is the weight (in trials) below which a pair counts as without history.
	faded = 0.05
	// prior is the score of a proxy without history.
	prior = 0.5
)

// SetLearning configures best-for-target (zero fields take the defaults).
func (f *Fleet) SetLearning(l Learning) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.learn = Learning{HalfLife: cmp.Or(l.HalfLife, DefaultHalfLife), Explore: l.Explore}
}

// decay brings o's counts to at.
func (o *outcome) decay(at time.Time, halfLife time.Duration) {
	if dt := at.Sub(o.at); dt > 0 {
		k := math.Exp2(-float64(dt) / float64(halfLife))
		o.granted, o.ok, o.blocked, o.at = o.granted*k, o.ok*k, o.blocked*k, at
	}
}

// trials and score are o's evidence and its score (see above).
func (o outcome) trials() float64 { return max(o.granted, o.ok+o.blocked) }
func (o outcome) score() float64  { return (o.trials() - o.blocked + 1) / (o.trials() + 2) }

// Outcome records what proxy did for target at at: grants, ok and blocked reports. An empty
// target records nothing (best-for-target needs one).
func (f *Fleet) Outcome(proxy, target string, granted, ok, blocked int, at time.Time) {
	if target == "" || granted+ok+blocked == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	byProxy := f.outcomes[target]
	o := byProxy[proxy]
	if o == nil {
		if f.nOutcomes >= maxOutcomes && f.pruneOutcomes(at) >= maxOutcomes {
			return
		}
		if byProxy == nil {
			byProxy = map[string]*outcome{}
			f.outcomes[target] = byProxy
		}
		o = &outcome{at: at}
		byProxy[proxy] = o
		f.nOutcomes++
	}
	o.decay(at, f.learn.HalfLife)
	o.granted += float64(granted)
	o.ok += float64(ok)
	o.blocked += float64(blocked)
}

// forgetOutcomes drops what proxy did for every target: its address changed, and a site's
// verdict is on an address. Callers hold mu.
func (f *Fleet) forgetOutcomes(proxy string) {
	for target, byProxy := range f.outcomes {
		if _, ok := byProxy[proxy]; ok {
			delete(byProxy, proxy)
			f.nOutcomes--
			if len(byProxy) == 0 {
				delete(f.outcomes, target)
			}
		}
	}
}

// pruneOutcomes drops the pairs faded by at and returns how many are left. Callers hold mu.
func (f *Fleet) pruneOutcomes(at time.Time) int {
	for target, byProxy := range f.outcomes {
		for name, o := range byProxy {
			if o.decay(at, f.learn.HalfLife); o.trials() < faded {
				delete(byProxy, name)
				f.nOutcomes--
			}
		}
		if len(byProxy) == 0 {
			delete(f.outcomes, target)
		}
	}
	return f.nOutcomes
}

// Score is proxy's score for target at at, and the trials it rests on (0 without history).
func (f *Fleet) Score(proxy, target string, at time.Time) (score, trials float64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	o, ok := f.outcomes[target][proxy]
	if !ok {
		return prior, 0
	}
	c := *o
	if c.decay(at, f.learn.HalfLife); c.trials() < faded {
		return prior, 0
	}
	return c.score(), c.trials()
}

// scored is a proxy with history for the acquire's target, as the cursor keeps it.
type scored struct {
	p     *proxyView
	score float64
	rank  rank
}

// best phases, in the order an exploiting acquire reads them; an exploring one reads
// bestFresh first.
const (
	bestGood  = iota // history, above the prior
	bestFresh        // no history, in the balanced order
	bestPoor         // history, at or below the prior
	bestDone
)

// history is the proxies with history for q's target that are members of s, scored at q.Now,
// as a heap whose top is the best (ties in the balanced order): an acquire pops the few it
// reads, so it costs one pass over the target's history and not a sort of it. Callers hold
// mu.
func (f *Fleet) history(q Query, s *selSet) scoredHeap {
	var out scoredHeap
	for name, o := range f.outcomes[q.target] {
		p := f.proxies[name]
		if p == nil || !s.member(p) {
			continue
		}
		c := *o
		if c.decay(q.Now, f.learn.HalfLife); c.trials() < faded {
			continue
		}
		out = append(out, scored{p: p, score: c.score(), rank: p.ix.rank})
	}
	heap.Init(&out)
	return out
}

// scoredHeap orders proxies by score, best first, then in the balanced order.
type scoredHeap []scored

func (h scoredHeap) Len() int { return len(h) }
func (h scoredHeap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].rank.compare(h[j].rank) < 0
}
func (h scoredHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *scoredHeap) Push(x any)   { *h = append(*h, x.(scored)) }
func (h *scoredHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// hasHistory says whether p has unfaded history for target at now. Callers hold mu.
func (f *Fleet) hasHistory(p *proxyView, target string, now time.Time) bool {
	o, ok := f.outcomes[target][p.name]
	if !ok {
		return false
	}
	c := *o
	c.decay(now, f.learn.HalfLife)
	return c.trials() >= faded
}

// nextBest is Next for best-for-target after the sticky proxy: it fills out up to n with the
// candidates of the phases in turn, keeping its place in cur. Callers hold mu.
func (f *Fleet) nextBest(q Query, s *selSet, cur *Cursor, out []Candidate, n int, usable func(*proxyView) bool) []Candidate {
	if !cur.started {
		cur.started = true
		cur.history = f.history(q, s)
		cur.explore = q.target != "" && q.Roll < f.learn.Explore
	}
	phases := [...]int{bestGood, bestFresh, bestPoor}
	if cur.explore {
		phases = [...]int{bestFresh, bestGood, bestPoor}
	}
	take := func(p *proxyView) {
		if usable(p) {
			c := f.candidate(p, false)
			c.order = orderBest
			out = append(out, c)
		}
	}
	for cur.phase < len(phases) && len(out) < n {
		switch phases[cur.phase] {
		case bestGood, bestPoor:
			good := phases[cur.phase] == bestGood
			for len(cur.history) > 0 && len(out) < n && (!good || cur.history[0].score > prior) {
				take(heap.Pop(&cur.history).(scored).p)
			}
			if len(cur.history) > 0 && (!good || cur.history[0].score > prior) {
				return out // n read; the phase goes on at the next call
			}
		case bestFresh:
			t := s.order(orderBalanced, q.min)
			end := t.ascend(cur.after, func(k rank, p *proxyView) bool {
				cur.after = &k
				if !f.hasHistory(p, q.target, q.Now) {
					take(p)
				}
				return len(out) < n
			})
			if !end {
				return out
			}
		}
		cur.phase++
	}
	return out
}

// usesBest says whether q orders by best-for-target.
func (q Query) usesBest() bool { return q.strategy == events.StrategyBestForTarget }
