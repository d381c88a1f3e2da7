package pools

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// drainSettle: a drained member's leases are counted only this long after its spec said
// drain, so that a grant racing the leasers' view of the drain is counted.
const drainSettle = 3 * time.Second

// tombstoneFor is how long a deleted pool's empty ledger stays: well above a leader lease
// and the longest pass, so that a create a stale controller still had in flight is deleted.
const tombstoneFor = 2 * time.Minute

// owned is a spec in proxies that names a pool as its owner.
type owned struct {
	rev  uint64
	spec *schemas.ProxySpec // nil when it does not parse: it is rewritten
}

// input is everything plan looks at for one pool. Leases and Blocked are fresh counts for the
// ledger's members; Phase is each member's phase as proxy_status has it ("" when none).
type input struct {
	Name    string
	Spec    *schemas.PoolSpec // nil: the pool was deleted
	SpecErr error             // the spec does not parse or validate, or the reconciler would refuse its members
	// SpecReason is SpecErr's reason: InvalidSpec when empty, or UnknownProvider,
	// InvalidPlacement (the reconciler's, for what its catalog refuses).
	SpecReason events.Reason
	SpecRev    uint64
	Ledger     *events.PoolStatus // nil: none recorded yet
	Owned      map[string]owned   // specs in proxies owned by this pool, by name
	// Taken says a ledger member's key holds a spec that is not the pool's (read fresh);
	// InUse says a fresh name is a key already (the view is enough: a create fails anyway).
	Taken   func(name string) bool
	InUse   func(name string) bool
	Phase   map[string]events.Phase
	Limited map[string]string        // members that wait for their provider's instance limit: its message
	Expiry  map[string]expiry        // members whose instance has a lifetime
	Stuck   map[string]stuck         // members that wait for quota or a failing provider target (placements.go)
	Boot    map[string]time.Duration // members Ready at least once: how long from put to Ready (boots.go)
	// Outdated are members whose instance the reconciler found outdated (the cloud_init
	// document their spec references was edited; credentials their provider cannot update
	// in place), by why: rolled like a template change (decision 86).
	Outdated map[string]events.Reason
	// RolloutPaused: the pool's rollout is paused, so no outdated member is retired for it.
	RolloutPaused bool
	Leases        map[string]int
	Blocked       map[string]int // distinct targets the member was reported blocked on in the window
	// Egress is where members leave from (quarantine.go), for the members that need it;
	// Quarantine the records of address_quarantine.
	Egress     map[string]egress
	Quarantine []events.Quarantine
	Demand     events.DemandSum // what the leasers measured of the pool (autoscale)
	Load       func(provider, zone string) int
	Now        time.Time
	NewSuffix  func() string
}

// write is a change to proxies, made after the ledger that allows it is recorded.
type write struct {
	name   string
	spec   []byte // nil: delete
	rev    uint64 // the revision it expects; 0 with spec: create
	reason events.Reason
	msg    string
}

// outcome is what to do for one pool: record Ledger (nil: delete the record, if there is
// one), then make the writes, then emit the events (the writes' own events are made by the
// applier).
type outcome struct {
	Ledger *events.PoolStatus
	Writes []write
	Events []events.Event
	// Quarantine are the records to write into address_quarantine, before the ledger.
	Quarantine []events.Quarantine
}

// plan decides one pass for one pool. It is pure: the same input gives the same outcome but
// for the fresh names it asks NewSuffix for.
func plan(in input) outcome {
	p := &planner{in: in, out: outcome{}}
	p.run()
	return p.out
}

type planner struct {
	in      input
	out     outcome
	members []events.PoolMember
	held    string                        // why a replacement waits, if one does
	scaled  *events.PoolAutoscale         // the autoscaler's state to record, with autoscale
	boots   []events.BootSample           // the last boots, to record (boots.go)
	holds   map[int]*events.PlacementHold // placements new members avoid (placements.go)
}

func (p *planner) emit(reason events.Reason, member, successor string, leases int, format string, args ...any) {
	p.out.Events = append(p.out.Events, events.Event{Kind: events.KindPool, Proxy: p.in.Name, At: p.in.Now, Reason: reason,
		Message: fmt.Sprintf(format, args...), Pool: &events.PoolEvent{Pool: p.in.Name, Member: member, Successor: successor, Leases: leases}})
}

func (p *planner) run() {
	in := p.in
	if in.Ledger != nil {
		p.members = slices.Clone(in.Ledger.Members)
	}
	switch {
	case in.Spec == nil && in.SpecErr == nil && in.Ledger == nil:
		// Specs name a pool that has no spec and never had a ledger: a typo or a pool yet to
		// be written. They are someone's proxies; nothing here made them, nothing deletes them.
		return
	case in.Spec == nil && in.SpecErr == nil:
		p.deletePool()
		return
	case in.SpecErr != nil:
		p.invalid()
		return
	}
	p.reconcileLedger()
	p.adopt()
	p.recordBoots()
	p.holdPlacements()
	p.autoscale()
	p.requarantine()
	p.retire()
	p.quarantineBurned()
	p.replace()
	p.scale()
	p.promote()
	p.finishDrains()
	p.writeSpecs()
	p.summarize()
}

// deletePool deletes every member at once: the user asked for the pool to go.
func (p *planner) deletePool() {
	for i := range p.members {
		if m := &p.members[i]; !m.Deleting {
			m.Deleting, m.Retire = true, events.ReasonPoolDeleted
		}
	}
	p.dropGone()
	for _, name := range sortedKeys(p.in.Owned) {
		p.out.Writes = append(p.out.Writes, write{name: name, rev: p.in.Owned[name].rev, reason: events.ReasonMemberDeleted,
			msg: fmt.Sprintf("member %s deleted: the pool was deleted", name)})
	}
	if len(p.members) == 0 && len(p.in.Owned) == 0 {
		// Nothing left. The record stays a while as a tombstone: a create still in flight from
		// a stale controller may land after this pass, and a spec naming a pool with neither
		// spec nor ledger is left alone, so only a ledger gets such a spec deleted.
		if l := p.in.Ledger; l != nil && l.Phase == events.PoolDeleting && len(l.Members) == 0 && p.in.Now.Sub(l.UpdatedAt) >= tombstoneFor {
			p.out.Ledger = nil
			return
		}
		p.record(events.PoolDeleting, events.ReasonPoolDeleted, "every member is deleted")
		return
	}
	p.record(events.PoolDeleting, events.ReasonPoolDeleted, fmt.Sprintf("deleting %d members", max(len(p.members), len(p.in.Owned))))
}

// dropGone removes ledger entries whose spec is gone, or belongs to someone else.
func (p *planner) dropGone() {
	p.members = slices.DeleteFunc(p.members, func(m events.PoolMember) bool {
		if _, ok := p.in.Owned[m.Name]; ok {
			return false
		}
		switch {
		case m.Deleting:
			return true // its delete landed
		case p.in.Taken(m.Name):
			p.emit(events.ReasonMemberLost, m.Name, "", 0, "member %s's spec no longer names pool %s as owner: it is left alone and replaced", m.Name, p.in.Name)
			return true
		case m.Rev != 0:
			// It was written (the ledger recorded its revision) and is gone: deleted by hand.
			p.emit(events.ReasonMemberLost, m.Name, "", 0, "member %s's spec is gone from proxies (deleted by hand?): a new member takes its place", m.Name)
			return true
		}
		return false // recorded, never seen written: its create is made (again)
	})
	// A successor that is gone no longer holds its predecessor back.
	for i := range p.members {
		if s := p.members[i].Successor; s != "" && !p.inLedger(s) {
			p.members[i].Successor = ""
		}
	}
}

func (p *planner) reconcileLedger() {
	p.dropGone()
	for i := range p.members {
		m := &p.members[i]
		m.RotateAt = rotateAt(p.in.Spec.Rotation, m.Name, m.CreatedAt)
		if at := p.lifetimeAt(m.Name); !at.IsZero() && (m.RotateAt.IsZero() || at.Before(m.RotateAt)) {
			m.RotateAt = at
		}
	}
}

// lifetimeAt is when member is replaced ahead of its instance's lifetime (zero: never).
func (p *planner) lifetimeAt(member string) time.Time {
	return lifetimeRotateAt(p.in.Expiry[member], time.Duration(p.in.Spec.Rotation.DrainTimeoutSeconds)*time.Second)
}

// adopt takes in specs that name the pool as owner but are not in its ledger (the record was
// deleted, or someone wrote one), as far as the cap allows; the rest are deleted.
func (p *planner) adopt() {
	for _, name := range sortedKeys(p.in.Owned) {
		if p.inLedger(name) {
			continue
		}
		o := p.in.Owned[name]
		if len(p.members) < p.in.Spec.MaxMembers() {
			p.members = append(p.members, events.PoolMember{Name: name, Placement: p.placementOf(o.spec), CreatedAt: p.in.Now})
			p.emit(events.ReasonMemberAdopted, name, "", 0, "spec %s names pool %s as owner: taken in as a member", name, p.in.Name)
			continue
		}
		p.out.Writes = append(p.out.Writes, write{name: name, rev: o.rev, reason: events.ReasonMemberDeleted,
			msg: fmt.Sprintf("it names pool %s as owner, which already has its %d members", p.in.Name, p.in.Spec.MaxMembers())})
	}
}

// placementOf is the index of the placement a spec is at, or 0 (then it is replaced if the
// placement differs).
func (p *planner) placementOf(s *schemas.ProxySpec) int {
	if s == nil {
		return 0
	}
	for i := range p.in.Spec.Placements {
		if identityOf(render(*p.in.Spec, p.in.Name, i, false)) == identityOf(*s) {
			return i
		}
	}
	return 0
}

// handEdited reports whether m's spec was last written by someone other than the controller
// and no longer says what the controller wrote.
func (p *planner) handEdited(m events.PoolMember) bool {
	o, ok := p.in.Owned[m.Name]
	if !ok {
		return false
	}
	if o.spec == nil {
		return true
	}
	return o.rev != m.Rev && !sameSpec(*o.spec, p.desired(m))
}

// retire marks, with the reason, every live member that must be replaced.
func (p *planner) retire() {
	spec := *p.in.Spec
	for i := range p.members {
		m := &p.members[i]
		o, present := p.in.Owned[m.Name]
		if m.Deleting || !m.DrainingSince.IsZero() || m.Retire != "" || !present || o.spec == nil {
			continue
		}
		var why events.Reason
		var msg string
		// A paused rollout holds the replacement of an outdated member only: one that must
		// go for another reason (failed, its lifetime ending, burned) still goes.
		outdated := p.in.Outdated[m.Name]
		held := outdated != "" && p.in.RolloutPaused
		if held {
			outdated = ""
		}
		switch {
		case len(spec.Placements) > 0 && m.Placement >= len(spec.Placements):
			why, msg = events.ReasonTemplateChanged, "its placement was removed from the pool"
		case identityOf(*o.spec) != identityOf(render(spec, p.in.Name, m.Placement, false)):
			why, msg = events.ReasonTemplateChanged, "the template changed what its instance is"
		case outdated == events.ReasonCredentialsChanged:
			why, msg = events.ReasonCredentialsChanged, "its credentials changed and its provider cannot update them in place"
		case outdated != "":
			why, msg = events.ReasonTemplateChanged, "its instance is outdated: the cloud_init document it references changed"
		case !p.lifetimeAt(m.Name).IsZero() && !p.in.Now.Before(p.lifetimeAt(m.Name)):
			// Successor-first now, rather than the collector cutting its leases at the end.
			why, msg = events.ReasonLifetimeEnding, fmt.Sprintf("its instance's lifetime ends at %s",
				p.in.Expiry[m.Name].until.UTC().Format(time.RFC3339))
		case !m.RotateAt.IsZero() && !p.in.Now.Before(m.RotateAt):
			why, msg = events.ReasonMaxAge, fmt.Sprintf("it reached its maximum age (%ds)", spec.Rotation.MaxAgeSeconds)
		case p.in.Phase[m.Name] == events.PhaseFailed:
			// The reconciler latches Failed until the spec changes: nothing else replaces it,
			// and a Failed successor would hold its predecessor (and a surge slot) forever.
			why, msg = events.ReasonMemberFailed, "its instance failed"
		case spec.Recycle != nil && p.in.Blocked[m.Name] >= spec.Recycle.BlockedTargets:
			why, msg = events.ReasonBurned, fmt.Sprintf("crawlers reported it blocked on %d distinct targets within %ds",
				p.in.Blocked[m.Name], spec.Recycle.WindowSeconds)
		case p.movable(*m):
			why, msg = events.ReasonPlacementFallback, p.moveMessage(*m)
		default:
			if held && p.held == "" {
				p.held = fmt.Sprintf("%s is outdated (%s); the pool's rollout is paused", m.Name, p.in.Outdated[m.Name])
			}
			continue
		}
		m.Retire = why
		p.emit(why, m.Name, "", 0, "member %s will be replaced: %s", m.Name, msg)
	}
}

func retiring(m events.PoolMember) int {
	if m.Retire != "" {
		return 1
	}
	return 0
}

// active is a member that serves and counts towards replicas: not draining, not deleting,
// and not already superseded by a successor.
func active(m events.PoolMember) bool {
	return !m.Deleting && m.DrainingSince.IsZero() && m.Successor == ""
}

func (p *planner) ready(name string) bool { return p.in.Phase[name] == events.PhaseReady }

// replace gives each retiring member a successor while the cap allows, or, without room for
// one, drains it first if minAvailable allows.
func (p *planner) replace() {
	spec := *p.in.Spec
	readyActive := 0
	for _, m := range p.members {
		if active(m) && p.ready(m.Name) {
			readyActive++
		}
	}
	order := p.indexes(func(m events.PoolMember) bool { return active(m) && m.Retire != "" })
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(p.members[a].CreatedAt.UnixNano(), p.members[b].CreatedAt.UnixNano())
	})
	activeCount := p.count(active)
	for _, i := range order {
		m := &p.members[i]
		if activeCount > *spec.Replicas {
			continue // scale() drains the surplus, retiring members first
		}
		if len(p.members) < spec.MaxMembers() {
			s := p.newMember(m.Placement, m.Name) // appends: m is stale from here
			m = &p.members[i]
			m.Successor = s
			p.emit(m.Retire, m.Name, s, 0, "member %s gets successor %s (%s)", m.Name, s, m.Retire)
			continue
		}
		wasReady := p.ready(m.Name)
		if wasReady && readyActive-1 < *spec.Rotation.MinAvailable {
			p.held = fmt.Sprintf("%s waits (%s): the pool is at its %d members and draining it would leave fewer than minAvailable %d Ready",
				m.Name, m.Retire, spec.MaxMembers(), *spec.Rotation.MinAvailable)
			continue
		}
		p.drain(m, fmt.Sprintf("no room for a successor (maxSurge %d); a new member follows it", *spec.Rotation.MaxSurge))
		activeCount--
		if wasReady {
			readyActive--
		}
	}
}

// scale creates members up to replicas, or drains the surplus: no leases first, then the
// fewest, then the oldest.
func (p *planner) scale() {
	spec := *p.in.Spec
	act := p.indexes(active)
	if surplus := len(act) - *spec.Replicas; surplus > 0 {
		slices.SortStableFunc(act, func(a, b int) int {
			ma, mb := p.members[a], p.members[b]
			// Among equal leases, a member already due for replacement goes first.
			return cmp.Or(cmp.Compare(p.in.Leases[ma.Name], p.in.Leases[mb.Name]),
				cmp.Compare(retiring(mb), retiring(ma)),
				cmp.Compare(ma.CreatedAt.UnixNano(), mb.CreatedAt.UnixNano()), cmp.Compare(ma.Name, mb.Name))
		})
		for _, i := range act[:surplus] {
			m := &p.members[i]
			if m.Retire == "" {
				m.Retire = events.ReasonScaleDown
			}
			p.drain(m, fmt.Sprintf("replicas is %d", *spec.Replicas))
		}
		return
	}
	for n := len(act); n < *spec.Replicas && len(p.members) < spec.MaxMembers(); n++ {
		p.newMember(-1, "")
	}
}

// promote drains each superseded member once its successor is Ready (or at once if it is not
// Ready itself: then draining it costs no availability).
func (p *planner) promote() {
	for i := range p.members {
		m := &p.members[i]
		if m.Successor == "" || m.Deleting || !m.DrainingSince.IsZero() {
			continue
		}
		switch {
		case p.ready(m.Successor):
			p.drain(m, fmt.Sprintf("its successor %s is Ready", m.Successor))
		case !p.ready(m.Name):
			p.drain(m, fmt.Sprintf("it is not Ready; successor %s is on its way", m.Successor))
		}
	}
}

// drain marks m draining: its spec says drain (no new leases) and it is deleted once its
// leases are gone or the drain timeout passes.
func (p *planner) drain(m *events.PoolMember, why string) {
	m.DrainingSince = p.in.Now
	p.emit(events.ReasonDrainStarted, m.Name, m.Successor, p.in.Leases[m.Name], "member %s is draining (%s): %s", m.Name, m.Retire, why)
}

// finishDrains marks for deletion each draining member without leases, or past the timeout.
func (p *planner) finishDrains() {
	timeout := time.Duration(p.in.Spec.Rotation.DrainTimeoutSeconds) * time.Second
	for i := range p.members {
		m := &p.members[i]
		if m.Deleting || m.DrainingSince.IsZero() {
			continue
		}
		o, ok := p.in.Owned[m.Name]
		if !ok {
			m.Deleting = true // its create never landed: nothing to drain
			continue
		}
		// The settle counts from when the spec was seen saying drain, not from when the ledger
		// recorded the intent: the spec write may land much later (a kill -9 between the two,
		// a failed write retried, a slow pass).
		switch {
		case o.spec == nil || !o.spec.Drain:
			m.DrainSeen = time.Time{}
		case m.DrainSeen.IsZero():
			m.DrainSeen = p.in.Now
		}
		settled := !m.DrainSeen.IsZero() && p.in.Now.Sub(m.DrainSeen) >= drainSettle
		switch n := p.in.Leases[m.Name]; {
		case settled && n == 0:
			m.Deleting = true
		case !p.in.Now.Before(m.DrainingSince.Add(timeout)):
			m.Deleting = true
			p.emit(events.ReasonDrainTimeout, m.Name, "", n, "member %s still holds %d leases after the drain timeout (%ds): deleting it",
				m.Name, n, p.in.Spec.Rotation.DrainTimeoutSeconds)
		}
	}
}

func (p *planner) inLedger(name string) bool {
	return slices.ContainsFunc(p.members, func(m events.PoolMember) bool { return m.Name == name })
}

func (p *planner) indexes(keep func(events.PoolMember) bool) []int {
	var out []int
	for i, m := range p.members {
		if keep(m) {
			out = append(out, i)
		}
	}
	return out
}

func (p *planner) count(keep func(events.PoolMember) bool) int { return len(p.indexes(keep)) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
