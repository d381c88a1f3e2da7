package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Instance limits fail closed. A provider's maxInstances (and maxInstancesPerTarget), set in
// its config entry and carried by its catalog record, bound the instances egressd may have
// there; the reconciler never sends a create that would pass them, whatever a pool or a user
// asks. The count is of the statuses that say an instance may exist (one was reported, or a
// create was sent), which the leader alone writes, each before its op goes out: a new leader
// reads them all before it decides, so no takeover and no kill -9 lets a create through
// unseen. The leader counts a decision when it makes it, before its write, so a batch cannot
// overrun the limit either; a write that then fails only over-counts until the stored status
// is read back. Instances the orphan collector finds are not egressd's, and do not count.
//
// When the limit is reached, proxies wait with reason LimitReached, and are created as room
// appears in the order they were declared (their status's CreatedAt, then name): a newer
// proxy decided first in a batch does not take the place of an older one.

// InstanceLimit is what Decide needs of the instance limits over one proxy: its provider's,
// its provider target's and the installation's (the reconciler's own maxInstances, across
// every provider).
type InstanceLimit struct {
	Max, PerTarget int            // 0: no limit
	Count          int            // the provider's instances that may exist
	TargetCount    map[string]int // of them, per target (host)
	Ahead          int            // older proxies of the provider waiting for room
	// GlobalMax bounds the instances of every provider together (0: no limit); GlobalCount
	// is how many may exist, GlobalAhead the older proxies waiting for that room whose own
	// provider has room.
	GlobalMax, GlobalCount, GlobalAhead int
}

// limitReached keeps a new instance from passing its provider's limits: the proxy waits,
// saying how full the provider or the target is and its place in line.
func (d *decider) limitReached(host string) bool {
	lim := d.in.Limit
	if lim == nil || d.mayExist() {
		return false
	}
	msg, ahead := "", lim.Ahead
	switch {
	case lim.GlobalMax > 0 && lim.GlobalCount+lim.GlobalAhead >= lim.GlobalMax:
		msg, ahead = fmt.Sprintf("the installation has %d of its %d instances (the reconciler's maxInstances)", lim.GlobalCount, lim.GlobalMax), lim.GlobalAhead
	case lim.Max > 0 && lim.Count+lim.Ahead >= lim.Max:
		msg = fmt.Sprintf("provider %s has %d of its %d instances (maxInstances)", d.in.Spec.Provider, lim.Count, lim.Max)
	case lim.PerTarget > 0 && lim.TargetCount[host] >= lim.PerTarget:
		msg = fmt.Sprintf("target %s of provider %s has %d of its %d instances (maxInstancesPerTarget)",
			host, d.in.Spec.Provider, lim.TargetCount[host], lim.PerTarget)
	default:
		return false
	}
	if ahead > 0 {
		msg += fmt.Sprintf("; %d declared before this one wait ahead of it", ahead)
	}
	d.st.Reason, d.st.Message = events.ReasonLimitReached, msg+"; it is created when room appears"
	d.wakeAt(d.now.Add(d.p.DriftPoll)) // room wakes it at once; this only bounds a missed wake
	return true
}

// instanceCap is one provider's limits, from its catalog record.
type instanceCap struct{ max, perTarget int }

// tally counts, per provider and target, the instances the statuses say may exist (a proxy's
// own, and its successor and retiring instances while it is rolled successor first, decision
// 98), and keeps the proxies waiting for room.
type tally struct {
	counted  map[string]placed // proxy → where its instances are, when it has any
	n        int               // instances counted, across every provider
	provider map[string]int
	target   map[[2]string]int
	waiting  map[string]map[string]time.Time // provider → waiting proxy → when declared
	freed    map[string]bool                 // providers that gained room since the last take
	// freedAny: an instance left somewhere since the last take, which is room under the
	// installation's limit for the waiters of every provider.
	freedAny bool
}

// placed is where a proxy's counted instances are (provider and target each): the one its
// status describes first when main, then its successor's and retiring instances.
type placed struct {
	main bool
	at   [][2]string
}

func newTally() *tally {
	return &tally{counted: map[string]placed{}, provider: map[string]int{}, target: map[[2]string]int{},
		waiting: map[string]map[string]time.Time{}, freed: map[string]bool{}}
}

// total is how many instances may exist, across every provider.
func (t *tally) total() int { return t.n }

// set records name's status (nil: none).
func (t *tally) set(name string, st *events.ProxyStatus) {
	if c, ok := t.counted[name]; ok {
		delete(t.counted, name)
		for _, at := range c.at {
			t.provider[at[0]]--
			t.target[at]--
			t.freed[at[0]], t.freedAny = true, true
			t.n--
		}
	}
	for p, w := range t.waiting {
		delete(w, name)
		if len(w) == 0 {
			delete(t.waiting, p)
		}
	}
	if st == nil || st.Mode == schemas.ModeExternal {
		return
	}
	var c placed
	if st.MayExist() {
		c = placed{main: true, at: [][2]string{{st.Provider, st.Host}}}
	}
	for _, h := range st.ExtraHosts() {
		c.at = append(c.at, [2]string{st.Provider, cmp.Or(h, st.Host)})
	}
	if len(c.at) > 0 {
		t.counted[name] = c
		for _, at := range c.at {
			t.provider[at[0]]++
			t.target[at]++
			delete(t.freed, at[0]) // this one took what room there was
			t.n++
		}
		t.freedAny = false
	}
	if st.MayExist() {
		return
	}
	if st.Reason == events.ReasonLimitReached && st.Provider != "" {
		if t.waiting[st.Provider] == nil {
			t.waiting[st.Provider] = map[string]time.Time{}
		}
		t.waiting[st.Provider][name] = st.CreatedAt
	}
}

// limit is what Decide needs for proxy name on provider (nil without limits). caps are every
// provider's limits and global the installation's.
func (t *tally) limit(caps map[string]*instanceCap, global int, provider, name string, declared time.Time) *InstanceLimit {
	c := caps[provider]
	if c == nil && global <= 0 {
		return nil
	}
	lim := &InstanceLimit{Count: t.provider[provider], TargetCount: map[string]int{}}
	// The proxy's own instance, counted from its stored status, is not in its way: a
	// decision that folds its delete's result may create again in the same step. Its
	// successor and retiring instances are (a successor's create counts its own instance).
	own, ok := t.counted[name]
	counted := ok && own.main
	var self [2]string
	if counted {
		self = own.at[0]
	}
	if counted && self[0] == provider {
		lim.Count--
	}
	if global > 0 {
		lim.GlobalMax, lim.GlobalCount = global, t.total()
		if counted {
			lim.GlobalCount--
		}
		lim.GlobalAhead = t.globalAhead(caps, name, declared)
	}
	if c == nil {
		return lim
	}
	lim.Max, lim.PerTarget = c.max, c.perTarget
	for at, n := range t.target {
		if at[0] == provider {
			if counted && at == self {
				n--
			}
			lim.TargetCount[at[1]] = n
		}
	}
	for other, at := range t.waiting[provider] {
		if other != name && (at.Before(declared) || at.Equal(declared) && other < name) {
			lim.Ahead++
		}
	}
	return lim
}

// globalAhead counts the proxies declared before name that wait for room and could take
// room under the installation's limit: those whose own provider is not full. A waiter held by
// its own provider's limit takes nothing from the others, so it holds none of them back.
func (t *tally) globalAhead(caps map[string]*instanceCap, name string, declared time.Time) int {
	n := 0
	for p, w := range t.waiting {
		if c := caps[p]; c != nil && c.max > 0 && t.provider[p] >= c.max {
			continue
		}
		for other, at := range w {
			if other != name && (at.Before(declared) || at.Equal(declared) && other < name) {
				n++
			}
		}
	}
	return n
}

// takeFreed returns the proxies waiting on providers that gained room, oldest first; with an
// installation's limit, an instance gone anywhere is room for the waiters of every provider.
func (t *tally) takeFreed(global int) []string {
	type waiter struct {
		name string
		at   time.Time
	}
	var ws []waiter
	for p, w := range t.waiting {
		if !t.freed[p] && (global <= 0 || !t.freedAny) {
			continue
		}
		for n, at := range w {
			ws = append(ws, waiter{n, at})
		}
	}
	slices.SortFunc(ws, func(a, b waiter) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.name, b.name)) })
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.name
	}
	clear(t.freed)
	t.freedAny = false
	return out
}

// setCap keeps provider's instance limits in step with its catalog record.
func (l *loop) setCap(provider string, rec events.CatalogRecord) {
	c := instanceCap{max: rec.Limits[events.LimitMaxInstances], perTarget: rec.Limits[events.LimitMaxPerTarget]}
	old := l.caps[provider]
	if c.max <= 0 && c.perTarget <= 0 {
		delete(l.caps, provider)
	} else {
		l.caps[provider] = &c
	}
	if old != nil && (l.caps[provider] == nil || *l.caps[provider] != *old) {
		l.tally.freed[provider] = true // a changed limit may make room
	}
}
