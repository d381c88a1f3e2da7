package leaser

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// The index must choose as the simple rule does: sort every eligible proxy (the reference
// below, which is what the leaser did before the index). Thousands of proxies go through
// random spec, status, health, lease and cooldown changes in the order the watches could
// deliver them; at intervals every selector's whole order and its refusal numbers are
// compared with the reference, and some selectors are first used half way through, so sets
// built late are checked against sets maintained all along.
func TestLeaseIndexMatchesFullSort(t *testing.T) {
	const proxies, steps, checkEvery = 2000, 30_000, 1500
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(1, seed))
	t.Logf("seed %d", seed)

	w := &world{t: t, rng: rng, v: newView(), proxies: proxies}
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
var strategies = []events.Strategy{events.StrategyBalanced, events.StrategyRoundRobin, events.StrategyRandom, events.StrategyLowestLatency}

// world drives a view with random entries as the watches would deliver them.
type world struct {
	t       *testing.T
	rng     *rand.Rand
	v       *view
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
	w.v.applySpec(entry{key: w.name(i), value: b, op: jetstream.KeyValuePut, rev: w.nextRev()})
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
	b, _ := json.Marshal(st)
	w.v.applyStatus(entry{key: w.name(i), value: b, op: jetstream.KeyValuePut, rev: w.nextRev()})
}

// times are few, so that proxies tie on lastLeased and the later keys decide.
var times = []time.Time{time.Unix(1000, 0), time.Unix(2000, 0), time.Unix(3000, 0)}

func (w *world) randomChange() {
	i := w.rng.IntN(w.proxies)
	name := w.name(i)
	slot := w.rng.IntN(6)
	key := slotKey(name, slot)
	switch op := w.rng.IntN(100); {
	case op < 5:
		w.putSpec(i)
	case op < 7:
		w.v.applySpec(entry{key: name, op: jetstream.KeyValueDelete, rev: w.nextRev()})
	case op < 12:
		w.putStatus(i)
	case op < 13:
		w.v.applyStatus(entry{key: name, op: jetstream.KeyValueDelete, rev: w.nextRev()})
	case op < 20:
		// Latencies are few, with unknown among them, so ties reach the name.
		// Verdicts are few too, some about another address (so unknown for this instance).
		h := events.ProxyHealth{V: 1, Proxy: name, LatencyMs: []float64{0, 10, 20}[w.rng.IntN(3)],
			Address:   []string{"127.0.0.1:3128", "127.0.0.1:3128", "127.0.0.1:3128", "127.0.0.9:3128"}[w.rng.IntN(4)],
			Anonymity: append([]events.Anonymity{""}, events.Anonymities...)[w.rng.IntN(4)]}
		b, _ := json.Marshal(h)
		w.v.applyHealth(entry{key: name, value: b, op: jetstream.KeyValuePut, rev: w.nextRev()})
	case op < 50:
		l := events.Lease{V: 1, Proxy: name, Slot: slot, AcquiredAt: times[w.rng.IntN(len(times))]}
		if w.rng.IntN(3) == 0 {
			l.Sticky = fmt.Sprintf("s%d", w.rng.IntN(5))
		}
		if w.rng.IntN(2) == 0 {
			w.v.noteLease(key, w.nextRev(), l) // this replica's own grant
		} else {
			b, _ := json.Marshal(l)
			w.v.applyLease(entry{key: key, value: b, op: jetstream.KeyValuePut, rev: w.nextRev()})
		}
	case op < 80:
		kind := []jetstream.KeyValueOp{jetstream.KeyValueDelete, jetstream.KeyValuePurge}[w.rng.IntN(2)]
		if w.rng.IntN(3) == 0 {
			if s, held := w.heldSlot(name, slot); held {
				w.v.noteReleased(key, s.rev) // this replica's own release
				return
			}
		}
		w.v.applyLease(entry{key: key, op: kind, rev: w.nextRev()})
	case op < 88:
		w.v.noteCooldown(w.cooldownKey(name), w.nextRev(), true)
	default:
		w.v.noteCooldown(w.cooldownKey(name), w.nextRev(), false)
	}
}

func (w *world) heldSlot(name string, slot int) (slotState, bool) {
	p := w.v.proxies[name]
	if p == nil {
		return slotState{}, false
	}
	s, ok := p.slots[slot]
	return s, ok
}

func (w *world) cooldownKey(name string) string {
	if w.rng.IntN(3) == 0 {
		return globalCooldownKey(name)
	}
	return targetCooldownKey(name, []string{"t1", "t2"}[w.rng.IntN(2)])
}

// compare checks the index's order and refusal numbers for one request against the
// reference, with an attempt that learned of a few proxies the view knows otherwise.
func (w *world) compare(sel map[string]string, tgt, sticky string, minAnon events.Anonymity, strategy events.Strategy) {
	w.t.Helper()
	q := newQuery(events.AcquireRequest{Selector: sel, Target: tgt, Sticky: sticky, MinAnonymity: minAnon, Strategy: strategy})
	var cur cursor
	var got []string
	for {
		batch := w.v.next(q, &cur, map[string]bool{}, candidateBatch)
		if len(batch) == 0 {
			break
		}
		for _, c := range batch {
			got = append(got, c.name)
		}
	}
	want := refCandidates(w.v, sel, tgt, sticky, minAnon, strategy)
	if strategy == events.StrategyRandom {
		// Any order but the sticky proxy's first place; every candidate once.
		if len(got) > 0 && len(want) > 0 && (w.v.proxies[want[0]].name == w.v.sticky[sticky].proxy) && got[0] != want[0] {
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
	at := newAttempt()
	for range 5 {
		at.full[w.name(w.rng.IntN(w.proxies))] = true
		at.coolingGlobal[w.name(w.rng.IntN(w.proxies))] = true
		at.coolingTarget[w.name(w.rng.IntN(w.proxies))] = true
	}
	if got, want := w.v.availability(q, at), refAvailability(w.v, sel, tgt, minAnon, at); got != want {
		w.t.Fatalf("selector %v target %q minAnonymity %q: availability %+v, want %+v", sel, tgt, minAnon, got, want)
	}
}

func (w *world) describe(names []string) []string {
	var out []string
	for _, n := range names[:min(len(names), 4)] {
		p := w.v.proxies[n]
		out = append(out, fmt.Sprintf("%s st %+v ix %+v held %d ref %d max %d slots %v cool %v", n, p.standing(), p.ix.st, p.held, refHeldBelowMax(p), p.maxLeases, p.slots, p.cooling))
	}
	return out
}

// refCandidates is the simple rule: every eligible proxy, sorted.
func refCandidates(v *view, selector map[string]string, tgt, sticky string, minAnon events.Anonymity, strategy events.Strategy) []string {
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
		if c := cmp.Compare(a.r.active, b.r.active); c != 0 {
			return c
		}
		if c := a.r.lastLeased.Compare(b.r.lastLeased); c != 0 {
			return c
		}
		if (a.r.latencyMs == 0) != (b.r.latencyMs == 0) {
			if a.r.latencyMs == 0 {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.r.latencyMs, b.r.latencyMs); c != 0 {
			return c
		}
		return cmp.Compare(a.r.name, b.r.name)
	})
	names := make([]string, len(out))
	for i, c := range out {
		names[i] = c.r.name
	}
	return names
}

// refAvailability counts a refusal over the whole fleet.
func refAvailability(v *view, selector map[string]string, tgt string, minAnon events.Anonymity, a *attempt) events.Availability {
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
		if a.full[name] || p.maxLeases-refHeldBelowMax(p) <= 0 {
			av.AtCapacity++
		}
		if tgt != "" && (p.cooling[tgt] || a.coolingTarget[name]) {
			av.CoolingTarget++
		}
		if p.cooling[""] || a.coolingGlobal[name] {
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

// entry is a KV entry as a watch delivers it, for feeding the view without a server: the
// view is a pure structure, and this test is about its arithmetic, not about NATS.
type entry struct {
	key   string
	value []byte
	op    jetstream.KeyValueOp
	rev   uint64
}

func (e entry) Bucket() string                  { return "test" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }
