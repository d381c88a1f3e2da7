package selection

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// This file is the specification of the selection core: whatever the index does to be fast,
// Next and Availability must answer as the plain rules of order.go do, written out here as a
// sort of every eligible proxy (refCandidates, which is what the leaser did before the index)
// and a count over the whole fleet (refAvailability). Thousands of proxies go through random
// spec, status, health, lease and cooldown updates, as the shell makes them from the watches
// in the order they could deliver them; at intervals every selector's whole order and its
// refusal numbers are compared with the reference, and some selectors are first used half
// way through, so sets built late are checked against sets maintained all along.
func TestLeaseIndexMatchesFullSort(t *testing.T) {
	const proxies, steps, checkEvery = 2000, 30_000, 1500
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(1, seed))
	t.Logf("seed %d", seed)

	w := &world{t: t, rng: rng, f: NewFleet(0), proxies: proxies}
	selectors := []map[string]string{
		{}, {"geo": "a"}, {"geo": "b", "tier": "1"}, {"tier": "2"}, {"geo": "zz"}, {"geo": "c", "tier": "2", "x": "y"},
	}
	targets := []string{"", "t1", "t2"}
	for i := range proxies {
		w.putSpec(i)
		w.putStatus(i)
	}
	for step := 1; step <= steps; step++ {
		w.randomChange()
		if step%checkEvery != 0 {
			continue
		}
		// Selectors are indexed the first time they are used: the later ones only after
		// half the changes, so a set built late meets sets maintained since the start.
		usable := selectors
		if step < steps/2 {
			usable = selectors[:3]
		}
		for _, sel := range usable {
			for _, tgt := range targets {
				sticky := fmt.Sprintf("s%d", rng.IntN(5))
				for _, min := range []events.Anonymity{"", events.AnonymityAnonymous, events.AnonymityElite} {
					w.compare(sel, tgt, sticky, min, "")
				}
				w.compare(sel, tgt, sticky, "", strategies[rng.IntN(len(strategies))])
			}
		}
	}
}

// strategies are those a property check draws from ("" is balanced).
var strategies = events.Strategies

// world drives a fleet with random updates as the shell would make them from the watches.
type world struct {
	t       *testing.T
	rng     *rand.Rand
	f       *Fleet
	proxies int
	rev     uint64
}

func (w *world) name(i int) string { return fmt.Sprintf("px-%04d", i) }

func (w *world) nextRev() uint64 { w.rev++; return w.rev }

func (w *world) putSpec(i int) {
	attrs := map[string]string{}
	if w.rng.IntN(4) > 0 {
		attrs["geo"] = []string{"a", "b", "c"}[w.rng.IntN(3)]
	}
	if w.rng.IntN(3) > 0 {
		attrs["tier"] = []string{"1", "2"}[w.rng.IntN(2)]
	}
	if w.rng.IntN(10) == 0 {
		attrs["x"] = "y"
	}
	b, _ := json.Marshal(map[string]any{"provider": "local", "maxLeases": w.rng.IntN(5), "attributes": attrs})
	if w.rng.IntN(50) == 0 {
		b = []byte(`{"provider":"local","maxLeases":-3}`) // invalid: unleasable
	}
	var spec *schemas.ProxySpec
	if s, err := schemas.ParseProxySpec(b); err == nil {
		spec = &s
	}
	w.f.SetSpec(w.name(i), w.nextRev(), false, spec)
}

func (w *world) putStatus(i int) {
	st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Provider: "local", Host: "local", IP: "127.0.0.1", Port: 3128}
	switch w.rng.IntN(8) {
	case 0:
		st.Phase = events.PhaseUnhealthy
	case 1:
		st.Phase = events.PhaseProvisioning
	case 2:
		st.IP = ""
	}
	w.f.SetStatus(w.name(i), w.nextRev(), st, true)
}

// times are few, so that proxies tie on lastLeased and the later keys decide.
var times = []time.Time{time.Unix(1000, 0), time.Unix(2000, 0), time.Unix(3000, 0)}

func (w *world) randomChange() {
	i := w.rng.IntN(w.proxies)
	name := w.name(i)
	slot := w.rng.IntN(6)
	switch op := w.rng.IntN(100); {
	case op < 5:
		w.putSpec(i)
	case op < 7:
		w.f.SetSpec(name, w.nextRev(), true, nil)
	case op < 12:
		w.putStatus(i)
	case op < 13:
		w.f.SetStatus(name, w.nextRev(), events.ProxyStatus{}, false)
	case op < 20:
		// Latencies are few, with unknown among them, so ties reach the name.
		// Verdicts are few too, some about another address (so unknown for this instance).
		h := events.ProxyHealth{V: 1, Proxy: name, LatencyMs: []float64{0, 10, 20}[w.rng.IntN(3)],
			Address:   []string{"127.0.0.1:3128", "127.0.0.1:3128", "127.0.0.1:3128", "127.0.0.9:3128"}[w.rng.IntN(4)],
			Anonymity: append([]events.Anonymity{""}, events.Anonymities...)[w.rng.IntN(4)]}
		w.f.SetHealth(name, h)
	case op < 50:
		l := events.Lease{V: 1, Proxy: name, Slot: slot, AcquiredAt: times[w.rng.IntN(len(times))]}
		if w.rng.IntN(3) == 0 {
			l.Sticky = fmt.Sprintf("s%d", w.rng.IntN(5))
		}
		w.f.SlotHeld(name, slot, Slot{Rev: w.nextRev(), Lease: l}) // a grant, or a slot a watch brought
	case op < 80:
		w.f.SlotFreed(name, slot) // released, expired or removed, held or not
	case op < 84:
		// What a proxy did for a target, for best-for-target: a few outcomes, some old
		// enough to have faded by the time the checks score them (learnedAt).
		at := learnedAt.Add(-time.Duration(w.rng.IntN(12)) * time.Hour)
		w.f.Outcome(name, []string{"t1", "t2"}[w.rng.IntN(2)], w.rng.IntN(3), w.rng.IntN(3), w.rng.IntN(3), at)
	case op < 88:
		w.f.SetCooling(name, w.cooldownTarget(), true, time.Time{})
	default:
		w.f.SetCooling(name, w.cooldownTarget(), false, time.Time{})
	}
}

// cooldownTarget is "" (every target) or one of the targets the checks ask for.
func (w *world) cooldownTarget() string {
	if w.rng.IntN(3) == 0 {
		return ""
	}
	return []string{"t1", "t2"}[w.rng.IntN(2)]
}

// compare checks the index's order and refusal numbers for one request against the
// reference, with an attempt that learned of a few proxies the view knows otherwise.
func (w *world) compare(sel map[string]string, tgt, sticky string, minAnon events.Anonymity, strategy events.Strategy) {
	w.t.Helper()
	q := NewQuery(events.AcquireRequest{Selector: sel, Target: tgt, Sticky: sticky, MinAnonymity: minAnon, Strategy: strategy})
	q.Now = learnedAt
	var cur Cursor
	var got []string
	for {
		batch := w.f.Next(q, &cur, map[string]bool{}, batchSize)
		if len(batch) == 0 {
			break
		}
		for _, c := range batch {
			got = append(got, c.Name)
		}
	}
	want := refCandidates(w.f, sel, tgt, sticky, minAnon, strategy)
	if strategy == events.StrategyBestForTarget {
		want = refBest(w.f, want, q)
	}
	if strategy == events.StrategyRandom {
		// Any order but the sticky proxy's first place; every candidate once.
		if len(got) > 0 && len(want) > 0 && (w.f.proxies[want[0]].name == w.f.sticky[sticky].proxy) && got[0] != want[0] {
			w.t.Fatalf("random: %s first, want the sticky %s", got[0], want[0])
		}
		slices.Sort(got)
		slices.Sort(want)
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		w.t.Fatalf("selector %v target %q sticky %s minAnonymity %q: %d candidates, want %d; from #%d\n%v\nwant\n%v", sel, tgt, sticky, minAnon,
			len(got), len(want), i, w.describe(got[i:]), w.describe(want[i:]))
	}
	at := NewLearned()
	for range 5 {
		at.Full[w.name(w.rng.IntN(w.proxies))] = true
		at.CoolingGlobal[w.name(w.rng.IntN(w.proxies))] = true
		at.CoolingTarget[w.name(w.rng.IntN(w.proxies))] = true
	}
	if got, want := w.f.Availability(q, at), refAvailability(w.f, sel, tgt, minAnon, at); got != want {
		w.t.Fatalf("selector %v target %q minAnonymity %q: availability %+v, want %+v", sel, tgt, minAnon, got, want)
	}
}

func (w *world) describe(names []string) []string {
	var out []string
	for _, n := range names[:min(len(names), 4)] {
		p := w.f.proxies[n]
		out = append(out, fmt.Sprintf("%s st %+v ix %+v held %d ref %d max %d slots %v cool %v", n, p.standing(), p.ix.st, p.held, refHeldBelowMax(p), p.maxLeases, p.slots, p.cooling))
	}
	return out
}

// balanced is the balanced order written out: fewest active leases, least recently leased,
// lowest latency (unknown last), name.
func balanced(a, b rank) int {
	if c := cmp.Compare(a.active, b.active); c != 0 {
		return c
	}
	if c := a.lastLeased.Compare(b.lastLeased); c != 0 {
		return c
	}
	if (a.latencyMs == 0) != (b.latencyMs == 0) {
		if a.latencyMs == 0 {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(a.latencyMs, b.latencyMs); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// refCandidates is the simple rule: every eligible proxy, sorted.
func refCandidates(v *Fleet, selector map[string]string, tgt, sticky string, minAnon events.Anonymity, strategy events.Strategy) []string {
	prev := ""
	if sticky != "" {
		prev = v.sticky[sticky].proxy
	}
	type cand struct {
		r      rank
		sticky bool
	}
	var out []cand
	for name, p := range v.proxies {
		if !p.leasable() || !matches(p.attrs, selector) || p.cooling[""] || (tgt != "" && p.cooling[tgt]) {
			continue
		}
		if p.maxLeases-refHeldBelowMax(p) <= 0 || !refAnonymity(p).AtLeast(minAnon) {
			continue
		}
		out = append(out, cand{r: rank{active: len(p.slots), lastLeased: p.lastLeased, latencyMs: p.latencyMs, name: name},
			sticky: name == prev})
	}
	slices.SortFunc(out, func(a, b cand) int {
		if a.sticky != b.sticky {
			if a.sticky {
				return -1
			}
			return 1
		}
		latency := func() int {
			if (a.r.latencyMs == 0) != (b.r.latencyMs == 0) {
				if a.r.latencyMs == 0 {
					return 1
				}
				return -1
			}
			return cmp.Compare(a.r.latencyMs, b.r.latencyMs)
		}
		if strategy == events.StrategyPacked {
			return -balanced(a.r, b.r) // the balanced order read from its end
		}
		switch strategy {
		case events.StrategyRoundRobin:
			if c := a.r.lastLeased.Compare(b.r.lastLeased); c != 0 {
				return c
			}
			return cmp.Compare(a.r.name, b.r.name)
		case events.StrategyLowestLatency:
			if c := latency(); c != 0 {
				return c
			}
		}
		return balanced(a.r, b.r)
	})
	names := make([]string, len(out))
	for i, c := range out {
		names[i] = c.r.name
	}
	return names
}

// refAvailability counts a refusal over the whole fleet.
func refAvailability(v *Fleet, selector map[string]string, tgt string, minAnon events.Anonymity, a Learned) events.Availability {
	var av events.Availability
	for name, p := range v.proxies {
		if !p.hasSpec || !matches(p.attrs, selector) {
			continue
		}
		av.Matched++
		if !p.leasable() {
			continue
		}
		av.Ready++
		if a.Full[name] || p.maxLeases-refHeldBelowMax(p) <= 0 {
			av.AtCapacity++
		}
		if tgt != "" && (p.cooling[tgt] || a.CoolingTarget[name]) {
			av.CoolingTarget++
		}
		if p.cooling[""] || a.CoolingGlobal[name] {
			av.CoolingGlobal++
		}
		if minAnon != "" && !refAnonymity(p).AtLeast(minAnon) {
			av.BelowAnonymity++
		}
	}
	return av
}

// refAnonymity is the verdict on p's instance, from the one judgement of events.
func refAnonymity(p *proxyView) events.Anonymity {
	return p.health.AnonymityVerdict(fmt.Sprintf("%s:%d", p.ip, p.port), p.addressAt, 0, time.Time{})
}

func refHeldBelowMax(p *proxyView) int {
	n := 0
	for s := range p.slots {
		if s < p.maxLeases {
			n++
		}
	}
	return n
}

// learnedAt is when the property check scores the history of best-for-target.
var learnedAt = time.Unix(100_000, 0)

// refBest is best.go's rule written out: from the eligible proxies in the balanced order
// (balanced, from refCandidates), the sticky one first, then, exploiting, those whose history
// scores above ½ best first (ties in the balanced order), those without history, and the rest
// best first; exploring, those without history first.
func refBest(v *Fleet, balanced []string, q Query) []string {
	type cand struct {
		name  string
		score float64
		pos   int
	}
	var good, fresh, poor []cand
	var out []string
	for i, name := range balanced {
		switch score, trials := v.Score(name, q.target, q.Now); {
		case i == 0 && q.sticky != "" && v.sticky[q.sticky].proxy == name:
			out = append(out, name)
		case trials == 0:
			fresh = append(fresh, cand{name, score, i})
		case score > 0.5:
			good = append(good, cand{name, score, i})
		default:
			poor = append(poor, cand{name, score, i})
		}
	}
	byScore := func(a, b cand) int { return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.pos, b.pos)) }
	slices.SortFunc(good, byScore)
	slices.SortFunc(poor, byScore)
	phases := [][]cand{good, fresh, poor}
	if q.target != "" && q.Roll < v.learn.Explore {
		phases = [][]cand{fresh, good, poor}
	}
	for _, ph := range phases {
		for _, c := range ph {
			out = append(out, c.name)
		}
	}
	return out
}

// batchSize is how many candidates the shell's acquire reads at a time.
const batchSize = 4
