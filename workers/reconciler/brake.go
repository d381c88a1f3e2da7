package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// The fleet-wide brake. An instance that stays Unhealthy past Policy.ReplaceUnhealthyAfter is
// replaced (deleted and created again): a broken VM is not left broken. But when many proxies
// of one provider target or one pool turn Unhealthy together, the likelier fault is what they
// share (the host's network, the route to the probe target, the probers' own path), and
// replacing them would only churn the fleet (and, on a cloud, pay for it) without curing
// anything. So a group with more than a share of its instances Unhealthy (and at least a
// minimum of them) is Suspect: none of its proxies is replaced for health until the share
// falls back, while the probers go on judging them. The share is of the instances now
// Unhealthy or being replaced for health, so replacements in flight do not hide the fault.
// Cluster API's MachineHealthCheck maxUnhealthy is the model.

// Default brake settings.
const (
	DefaultBrakeShare   = 50 // percent
	DefaultBrakeMinimum = 3
)

// Brake is the brake's setting: a group is Suspect when more than Share percent of its
// instances, and at least Minimum of them, are Unhealthy.
type Brake struct{ Share, Minimum int }

// suspect reports whether unhealthy of total trips the brake.
func (b Brake) suspect(unhealthy, total int) bool {
	return total > 0 && unhealthy >= b.Minimum && unhealthy*100 > b.Share*total
}

// group names a brake group: a provider target or a pool.
type group struct{ scope, name string }

// brakeTally counts, per group, the proxies with an instance and the Unhealthy ones among
// them, from the statuses as decided; it remembers which groups are Suspect.
type brakeTally struct {
	b       Brake
	member  map[string][]group            // proxy → its groups, while it has an instance
	total   map[group]int                 // proxies with an instance
	sick    map[group]map[string]struct{} // of them, the Unhealthy ones
	suspect map[group]bool
	flipped map[group]bool // groups whose verdict changed since the last take
	// released is when each group's brake last let go: its proxies still Unhealthy then get
	// a whole ReplaceUnhealthyAfter from there to recover, as after any outage.
	released map[group]time.Time
	now      func() time.Time
}

func newBrakeTally(b Brake) *brakeTally {
	return &brakeTally{b: b, member: map[string][]group{}, total: map[group]int{}, sick: map[group]map[string]struct{}{},
		suspect: map[group]bool{}, flipped: map[group]bool{}, released: map[group]time.Time{}, now: time.Now}
}

// groupsOf are the groups of a status with an instance.
func groupsOf(st *events.ProxyStatus) []group {
	if st == nil || st.Mode == schemas.ModeExternal || st.InstanceID == "" || st.Provider == "" {
		return nil
	}
	return groupsAt(st.Provider, st.Host, st.Pool)
}

// groupsAt are the groups of a proxy on provider/host in pool ("" for none): the target first.
func groupsAt(provider, host, pool string) []group {
	gs := []group{{events.SuspectTarget, provider + "/" + host}}
	if pool != "" {
		gs = append(gs, group{events.SuspectPool, pool})
	}
	return gs
}

// sickStatus: Unhealthy by the probers, or being replaced for it.
func sickStatus(st *events.ProxyStatus) bool {
	return st.Phase == events.PhaseUnhealthy && st.Reason != events.ReasonHeaderLeak || st.Teardown == events.ReasonUnhealthyReplaced
}

// set records name's status (nil: none).
func (t *brakeTally) set(name string, st *events.ProxyStatus) {
	for _, g := range t.member[name] {
		t.total[g]--
		delete(t.sick[g], name)
		t.judge(g)
	}
	delete(t.member, name)
	gs := groupsOf(st)
	if len(gs) == 0 {
		return
	}
	t.member[name] = gs
	for _, g := range gs {
		t.total[g]++
		if sickStatus(st) {
			if t.sick[g] == nil {
				t.sick[g] = map[string]struct{}{}
			}
			t.sick[g][name] = struct{}{}
		}
		t.judge(g)
	}
}

func (t *brakeTally) judge(g group) {
	now := t.b.suspect(len(t.sick[g]), t.total[g])
	if now != t.suspect[g] {
		t.flipped[g] = !t.flipped[g] // flipped twice since the last take is no change
		if !t.flipped[g] {
			delete(t.flipped, g)
		}
	}
	if now {
		t.suspect[g] = true
	} else if t.suspect[g] {
		delete(t.suspect, g)
		t.released[g] = t.now().UTC()
	}
	if t.total[g] <= 0 {
		delete(t.total, g)
		delete(t.sick, g)
	}
}

// held is the Suspect group that holds the replacement of a proxy on provider/host in pool,
// if any: the target first.
func (t *brakeTally) held(provider, host, pool string) *events.Suspect {
	for _, g := range groupsAt(provider, host, pool) {
		if t.suspect[g] {
			return &events.Suspect{Scope: g.scope, Name: g.name, Unhealthy: len(t.sick[g]), Total: t.total[g]}
		}
	}
	return nil
}

// releasedAt is when the brake last let go of a group of a proxy on provider/host in pool
// (zero: never since this leader began).
func (t *brakeTally) releasedAt(provider, host, pool string) time.Time {
	var last time.Time
	for _, g := range groupsAt(provider, host, pool) {
		if at := t.released[g]; at.After(last) {
			last = at
		}
	}
	return last
}

// flip is a group whose verdict changed, and its Unhealthy proxies to decide again.
type flip struct {
	g       group
	suspect bool
	note    events.Suspect
	sick    []string
}

// takeFlips returns the groups whose verdict changed since the last take.
func (t *brakeTally) takeFlips() []flip {
	var out []flip
	for g := range t.flipped {
		f := flip{g: g, suspect: t.suspect[g], note: events.Suspect{Scope: g.scope, Name: g.name, Unhealthy: len(t.sick[g]), Total: t.total[g]}}
		for n := range t.sick[g] {
			f.sick = append(f.sick, n)
		}
		out = append(out, f)
	}
	clear(t.flipped)
	return out
}

// event is the flip's event: a provider event for a target, a pool event for a pool.
func (f flip) event(now time.Time) events.Event {
	ev := events.Event{V: 1, At: now, Reason: events.ReasonSuspectCleared}
	if f.suspect {
		ev.Reason, ev.Message = events.ReasonSuspect, f.note.String()
	} else {
		ev.Message = fmt.Sprintf("%s %s: %d of %d proxies Unhealthy; replacements for health go on", f.g.scope, f.g.name, f.note.Unhealthy, f.note.Total)
	}
	ev.Kind, ev.Proxy = events.KindProvider, f.g.name
	if f.g.scope == events.SuspectPool {
		ev.Kind = events.KindPool
	}
	return ev
}

// replaceUnhealthy replaces an instance that stayed Unhealthy (the probers' verdict on its
// address, not a header leak: a new instance would leak alike) past ReplaceUnhealthyAfter,
// unless the brake holds its group. It reports whether it issued the delete.
func (d *decider) replaceUnhealthy() bool {
	st := d.st
	st.Suspect = events.Suspect{}
	healthy, judged := d.verdict()
	if st.InstanceID == "" || st.IP == "" || !judged || healthy {
		return false
	}
	if s := d.in.Suspect; s != nil {
		st.Suspect = *s
		return false
	}
	after := d.p.ReplaceUnhealthyAfter
	if after <= 0 {
		return false
	}
	since := d.in.Health.LastTransitionAt
	if since.IsZero() {
		return false // a record that does not say since when: never replace on a guess
	}
	for _, t := range []time.Time{st.AddressAt, d.in.BrakeReleasedAt} {
		if since.Before(t) {
			since = t
		}
	}
	if at := since.Add(after); d.now.Before(at) {
		d.wakeAt(at)
		return false
	}
	st.Teardown, st.Reason = events.ReasonUnhealthyReplaced, events.ReasonUnhealthyReplaced
	st.Message = fmt.Sprintf("Unhealthy for %s (%s); deleting the instance to create it again", d.now.Sub(since).Round(time.Second), d.in.Health.LastError)
	d.deleteInstance()
	return true
}

// count records name's status (nil: none) as decided or read: in the limits' tally and the
// brake's.
func (l *loop) count(name string, st *events.ProxyStatus) {
	l.tally.set(name, st)
	l.brakes.set(name, st)
	l.rollouts.set(name, st)
}

// announceFlips publishes an event for each group whose verdict changed and decides its
// Unhealthy proxies again: a Suspect group marks them held, a cleared one replaces those due.
func (l *loop) announceFlips(ctx context.Context) {
	for _, f := range l.brakes.takeFlips() {
		ev := f.event(time.Now().UTC())
		l.log.Warn("brake", "scope", f.g.scope, "group", f.g.name, "suspect", f.suspect, "unhealthy", f.note.Unhealthy, "total", f.note.Total)
		l.publishEvent(ctx, ev)
		l.enqueue(f.sick)
	}
}
