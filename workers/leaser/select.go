package leaser

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
)

// candidate is a proxy an acquire may try, with the slots the view believes free.
type candidate struct {
	name       string
	free       []int // a few of the slots the view believes free, in random order
	active     int
	lastLeased time.Time
	latencyMs  float64 // 0: unknown, sorts last
	sticky     bool
	endpoint
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

// leasable reports whether p can be handed out at all: a valid spec, phase Ready and an address.
func (p *proxyView) leasable() bool {
	return p.hasSpec && p.hasStatus && p.phase == events.PhaseReady && p.ip != "" && p.port > 0
}

// candidates returns the eligible proxies for a request, best first: the sticky key's
// previous proxy, then fewest active leases, least recently leased, lowest probe latency,
// name.
func (v *view) candidates(selector map[string]string, tgt, sticky string) []candidate {
	v.mu.RLock()
	prev := ""
	if sticky != "" {
		prev = v.sticky[sticky].proxy
	}
	var out []candidate
	for name, p := range v.proxies {
		if !p.leasable() || !matches(p.attrs, selector) || p.cooling[""] || (tgt != "" && p.cooling[tgt]) {
			continue
		}
		free := freeSlots(p, slotsPerCandidate)
		if len(free) == 0 {
			continue
		}
		out = append(out, candidate{name: name, free: free, active: len(p.slots), lastLeased: p.lastLeased,
			latencyMs: p.latencyMs, sticky: name == prev,
			endpoint: p.endpoint()})
	}
	v.mu.RUnlock()
	slices.SortFunc(out, compareCandidates)
	return out
}

func compareCandidates(a, b candidate) int {
	if a.sticky != b.sticky {
		if a.sticky {
			return -1
		}
		return 1
	}
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
// counts are not a partition: a Ready proxy at capacity that also cools down counts in both.
func (v *view) availability(selector map[string]string, tgt string, a *attempt) events.Availability {
	v.mu.RLock()
	defer v.mu.RUnlock()
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
		if a.full[name] || !hasFreeSlot(p) {
			av.AtCapacity++
		}
		if tgt != "" && (p.cooling[tgt] || a.coolingTarget[name]) {
			av.CoolingTarget++
		}
		if p.cooling[""] || a.coolingGlobal[name] {
			av.CoolingGlobal++
		}
	}
	return av
}

// hasFreeSlot reports whether a slot below maxLeases is free; slots held above a shrunk
// maxLeases do not count, and maxLeases 0 has none.
func hasFreeSlot(p *proxyView) bool { return p.maxLeases-heldBelowMax(p) > 0 }

func heldBelowMax(p *proxyView) int {
	n := 0
	for s := range p.slots {
		if s < p.maxLeases {
			n++
		}
	}
	return n
}

// slotsPerCandidate bounds the Creates one acquire spends on one proxy: if that many slots the
// view thought free are taken, the view is far behind and the next proxy is a better bet.
const slotsPerCandidate = 8

// freeSlots returns up to limit free slots of p in random order, so that replicas racing for
// one proxy spread over its slots. Its cost does not grow with maxLeases (up to 10,000) while
// a quarter of the slots are free.
func freeSlots(p *proxyView, limit int) []int {
	free := p.maxLeases - heldBelowMax(p)
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
