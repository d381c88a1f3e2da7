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

// InstanceLimit is what Decide needs of a provider's instance limits for one proxy.
type InstanceLimit struct {
	Max, PerTarget int            // 0: no limit
	Count          int            // the provider's instances that may exist
	TargetCount    map[string]int // of them, per target (host)
	Ahead          int            // older proxies of the provider waiting for room
}

// limitReached keeps a new instance from passing its provider's limits: the proxy waits,
// saying how full the provider or the target is and its place in line.
func (d *decider) limitReached(host string) bool {
	lim := d.in.Limit
	if lim == nil || d.mayExist() {
		return false
	}
	msg := ""
	switch {
	case lim.Max > 0 && lim.Count+lim.Ahead >= lim.Max:
		msg = fmt.Sprintf("provider %s has %d of its %d instances (maxInstances)", d.in.Spec.Provider, lim.Count, lim.Max)
	case lim.PerTarget > 0 && lim.TargetCount[host] >= lim.PerTarget:
		msg = fmt.Sprintf("target %s of provider %s has %d of its %d instances (maxInstancesPerTarget)",
			host, d.in.Spec.Provider, lim.TargetCount[host], lim.PerTarget)
	default:
		return false
	}
	if lim.Ahead > 0 {
		msg += fmt.Sprintf("; %d declared before this one wait ahead of it", lim.Ahead)
	}
	d.st.Reason, d.st.Message = events.ReasonLimitReached, msg+"; it is created when room appears"
	d.wakeAt(d.now.Add(d.p.DriftPoll)) // room wakes it at once; this only bounds a missed wake
	return true
}

// instanceCap is one provider's limits, from its catalog record.
type instanceCap struct{ max, perTarget int }

// tally counts, per provider and target, the proxies whose status says an instance may exist,
// and keeps the proxies waiting for room.
type tally struct {
	counted  map[string][2]string // proxy → its provider and target, when counted
	provider map[string]int
	target   map[[2]string]int
	waiting  map[string]map[string]time.Time // provider → waiting proxy → when declared
	freed    map[string]bool                 // providers that gained room since the last take
}

func newTally() *tally {
	return &tally{counted: map[string][2]string{}, provider: map[string]int{}, target: map[[2]string]int{},
		waiting: map[string]map[string]time.Time{}, freed: map[string]bool{}}
}

// set records name's status (nil: none).
func (t *tally) set(name string, st *events.ProxyStatus) {
	if at, ok := t.counted[name]; ok {
		delete(t.counted, name)
		t.provider[at[0]]--
		t.target[at]--
		t.freed[at[0]] = true
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
	if st.InstanceID != "" || !st.ProvisionAt.IsZero() {
		at := [2]string{st.Provider, st.Host}
		t.counted[name] = at
		t.provider[at[0]]++
		t.target[at]++
		delete(t.freed, at[0]) // this one took what room there was
		return
	}
	if st.Reason == events.ReasonLimitReached && st.Provider != "" {
		if t.waiting[st.Provider] == nil {
			t.waiting[st.Provider] = map[string]time.Time{}
		}
		t.waiting[st.Provider][name] = st.CreatedAt
	}
}

// limit is what Decide needs for proxy name on provider (nil without limits).
func (t *tally) limit(c *instanceCap, provider, name string, declared time.Time) *InstanceLimit {
	if c == nil {
		return nil
	}
	lim := &InstanceLimit{Max: c.max, PerTarget: c.perTarget, Count: t.provider[provider], TargetCount: map[string]int{}}
	for at, n := range t.target {
		if at[0] == provider {
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

// takeFreed returns the proxies waiting on providers that gained room, oldest first.
func (t *tally) takeFreed() []string {
	var out []string
	for p := range t.freed {
		w := t.waiting[p]
		names := make([]string, 0, len(w))
		for n := range w {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(w[a].Compare(w[b]), cmp.Compare(a, b)) })
		out = append(out, names...)
	}
	clear(t.freed)
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
