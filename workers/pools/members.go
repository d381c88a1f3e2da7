package pools

import (
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// A pass's writes of members: each member's spec from the template, a new member's name,
// and the placement it goes to, spread over the pool's placements by load.

// desired is the spec member m should have: the template at its placement, or for a member
// being replaced because its instance changed, its own instance with the rest from the template.
func (p *planner) desired(m events.PoolMember) schemas.ProxySpec {
	want := render(*p.in.Spec, p.in.Name, m.Placement, !m.DrainingSince.IsZero())
	// A member's instance is never changed by writing its spec (the reconciler would replace
	// it under its leases): an instance that differs from the template is rolled by retire.
	if o, ok := p.in.Owned[m.Name]; ok && o.spec != nil && identityOf(*o.spec) != identityOf(want) {
		return inPlace(*o.spec, want)
	}
	return want
}

// writeSpecs makes every member's spec what it should be: creates, in-place updates, reverts
// of hand edits, drains and deletes.
func (p *planner) writeSpecs() {
	for i := range p.members {
		m := &p.members[i]
		o, present := p.in.Owned[m.Name]
		if m.Deleting {
			if present {
				p.out.Writes = append(p.out.Writes, write{name: m.Name, rev: o.rev, reason: events.ReasonMemberDeleted,
					msg: fmt.Sprintf("member %s deleted (%s)", m.Name, m.Retire)})
			}
			continue
		}
		want := p.desired(*m)
		b, back, err := encode(want)
		if err != nil {
			continue // the template validated, so a member of it does too
		}
		switch {
		case !present:
			if !p.in.Taken(m.Name) {
				p.out.Writes = append(p.out.Writes, write{name: m.Name, spec: b, reason: events.ReasonMemberCreated,
					msg: fmt.Sprintf("member %s created", m.Name)})
			}
		case o.spec != nil && sameSpec(*o.spec, back):
			m.Rev = o.rev // what we wrote (a crash may have kept the revision from the ledger)
		case p.handEdited(*m):
			p.out.Writes = append(p.out.Writes, write{name: m.Name, spec: b, rev: o.rev, reason: events.ReasonMemberReverted,
				msg: fmt.Sprintf("member %s was edited by hand: reverted to the pool's template", m.Name)})
		default:
			reason := events.ReasonMemberUpdated
			if x := *o.spec; x.Drain != back.Drain {
				if x.Drain = back.Drain; sameSpec(x, back) {
					reason = "" // only drain changed: DrainStarted said it
				}
			}
			p.out.Writes = append(p.out.Writes, write{name: m.Name, spec: b, rev: o.rev, reason: reason,
				msg: fmt.Sprintf("member %s updated in place from the template", m.Name)})
		}
	}
}

// newMember records a member with a fresh name at placement idx (-1: by the spread) and
// returns its name; its spec is written by writeSpecs.
func (p *planner) newMember(idx int, replaces string) string {
	if idx < 0 || (len(p.in.Spec.Placements) > 0 && idx >= len(p.in.Spec.Placements)) || p.avoid(idx) {
		idx = p.spread(replaces)
	}
	var name string
	for {
		name = memberName(p.in.Name, p.in.NewSuffix())
		if !p.in.InUse(name) && !p.inLedger(name) {
			break
		}
	}
	p.members = append(p.members, events.PoolMember{Name: name, Placement: idx, CreatedAt: p.in.Now,
		RotateAt: rotateAt(p.in.Spec.Rotation, name, p.in.Now), QuarantineRound: p.roundAfter(replaces)})
	return name
}

// spread picks the placement of a new member: round-robin keeps the members per placement
// even (lowest index first); least-loaded picks the placement with the fewest proxies of the
// whole fleet on its provider and zone, then as round-robin. A member being replaced does not
// count for its placement.
func (p *planner) spread(replaces string) int {
	spec := *p.in.Spec
	if len(spec.Placements) == 0 {
		return 0
	}
	per := make([]int, len(spec.Placements))
	for _, m := range p.members {
		if m.Name != replaces && !m.Deleting && m.DrainingSince.IsZero() && m.Placement < len(per) {
			per[m.Placement]++
		}
	}
	// The fleet's load counts specs in proxies; members recorded in this pass are not there yet.
	pending := make([]int, len(spec.Placements))
	for _, m := range p.members {
		if _, ok := p.in.Owned[m.Name]; !ok && !m.Deleting && m.Placement < len(pending) {
			pending[m.Placement]++
		}
	}
	best := -1
	for i := range per {
		if p.avoid(i) {
			continue // held (placements.go): new members go elsewhere while another placement is free
		}
		if best < 0 {
			best = i
			continue
		}
		if spec.Spread == schemas.SpreadLeastLoaded {
			li, lb := p.load(i)+pending[i], p.load(best)+pending[best]
			if li != lb {
				if li < lb {
					best = i
				}
				continue
			}
		}
		if per[i] < per[best] {
			best = i
		}
	}
	return max(best, 0)
}

func (p *planner) load(i int) int {
	if p.in.Load == nil {
		return 0
	}
	s := render(*p.in.Spec, p.in.Name, i, false)
	return p.in.Load(s.Provider, s.Placement.Zone)
}
