package pools

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Quarantine of burned addresses (docs/pools.md#quarantine, decision 96). A member recycled
// for blocks (Burned) puts its egress address, with the neighbourhood the pool's
// recycle.quarantine names, into address_quarantine for a while: the provisioners hand that
// to every create, so the local provider gives it to no new instance; and a member that
// replaced a burned one (its QuarantineRound) is checked once its egress is known, and
// replaced again, successor first like any retirement, while it still leaves from a
// quarantined address, at most maxReplacements times in a row.

// egress is where a member's traffic leaves from, as far as is known: a probe's observation
// (observed), else its expected egress or its own address.
type egress struct {
	addr     string
	observed bool
	own      string // the member's own address
}

// quarantineOf is the pool's quarantine, nil when it has none.
func quarantineOf(spec *schemas.PoolSpec) *schemas.Quarantine {
	if spec == nil || spec.Recycle == nil || !spec.Recycle.Quarantine.On() {
		return nil
	}
	return spec.Recycle.Quarantine
}

// roundAfter is the QuarantineRound of the member that replaces the member named replaces:
// 1 after a burned member, one more after one replaced for a quarantined egress, else 0.
func (p *planner) roundAfter(replaces string) int {
	if quarantineOf(p.in.Spec) == nil || replaces == "" {
		return 0
	}
	i := slices.IndexFunc(p.members, func(m events.PoolMember) bool { return m.Name == replaces })
	switch {
	case i < 0:
		return 0
	case p.members[i].Retire == events.ReasonBurned:
		return 1
	case p.members[i].Retire == events.ReasonQuarantined:
		return p.members[i].QuarantineRound + 1
	}
	return 0
}

// holding is the live quarantine record, not of member itself, that holds addr.
func (p *planner) holding(member, addr string) (events.Quarantine, bool) {
	for _, q := range p.in.Quarantine {
		if q.Proxy != member && q.Live(p.in.Now) && q.Holds(addr) {
			return q, true
		}
	}
	return events.Quarantine{}, false
}

// requarantine checks each member that replaced a burned one: once its egress is known it
// is replaced again if that egress is in quarantine (within maxReplacements), or cleared once
// a probe saw it leave from elsewhere. It is kept at once where a new member would get the
// same egress: the egress is not the member's own address (a NAT, its host), or other
// members leave from there too. It runs before retire.
func (p *planner) requarantine() {
	qc := quarantineOf(p.in.Spec)
	for i := range p.members {
		m := &p.members[i]
		if m.QuarantineRound == 0 || m.Deleting || !m.DrainingSince.IsZero() || m.Retire != "" {
			continue
		}
		if qc == nil {
			m.QuarantineRound = 0
			continue
		}
		e := p.in.Egress[m.Name]
		if e.addr == "" {
			continue // not known yet
		}
		q, held := p.holding(m.Name, e.addr)
		if !held {
			if e.observed {
				m.QuarantineRound = 0 // a probe saw it leave from elsewhere: done
			}
			continue
		}
		why := fmt.Sprintf("its egress %s is in quarantine until %s (%s, burned on %s)", e.addr, q.Until.UTC().Format(time.RFC3339), q.Prefix, q.Proxy)
		switch shared := p.sharing(m.Name, q); {
		case e.own != "" && e.own != e.addr:
			m.QuarantineRound = 0
			p.emitQuarantine(events.ReasonQuarantineKept, m.Name, q, "member %s is kept: %s, but that is not its own address %s: "+
				"its traffic leaves through a NAT or its host, which a new instance would leave through too", m.Name, why, e.own)
		case len(shared) > 0:
			m.QuarantineRound = 0
			p.emitQuarantine(events.ReasonQuarantineKept, m.Name, q, "member %s is kept: %s, but %s leave from it too: the egress is shared, a new member would get it again",
				m.Name, why, strings.Join(shared, ", "))
		case m.QuarantineRound > *qc.MaxReplacements:
			m.QuarantineRound = 0
			p.emitQuarantine(events.ReasonQuarantineKept, m.Name, q, "member %s is kept: %s, and %d replacements in a row gave no other (recycle.quarantine.maxReplacements)",
				m.Name, why, *qc.MaxReplacements)
		default:
			m.Retire = events.ReasonQuarantined
			p.emitQuarantine(events.ReasonQuarantined, m.Name, q, "member %s will be replaced: %s; replacement %d of at most %d",
				m.Name, why, m.QuarantineRound, *qc.MaxReplacements)
		}
	}
}

// sharing are the pool's other serving members, outside any burn's line, that a probe saw
// leave from an address q holds.
func (p *planner) sharing(member string, q events.Quarantine) []string {
	var out []string
	for _, o := range p.members {
		e := p.in.Egress[o.Name]
		if o.Name != member && o.Name != q.Proxy && o.QuarantineRound == 0 && o.Retire == "" && active(o) && e.observed && q.Holds(e.addr) {
			out = append(out, o.Name)
		}
	}
	return out
}

// quarantineBurned puts each burned member's egress into quarantine (once: a live record of
// it for the address is enough), to be written before the ledger that retires it.
func (p *planner) quarantineBurned() {
	qc := quarantineOf(p.in.Spec)
	if qc == nil {
		return
	}
	for _, m := range p.members {
		e := p.in.Egress[m.Name]
		if m.Retire != events.ReasonBurned || m.Deleting || e.addr == "" || p.quarantined(m.Name, e.addr) {
			continue
		}
		pfx, ok := events.AddressPrefix(e.addr, qc.IPv4Prefix, qc.IPv6Prefix)
		if !ok {
			continue
		}
		q := events.Quarantine{V: 1, Address: e.addr, Prefix: pfx.String(), Pool: p.in.Name, Proxy: m.Name, Reason: events.ReasonBurned,
			At: p.in.Now, Until: p.in.Now.Add(time.Duration(*qc.Seconds) * time.Second)}
		if e.own != e.addr {
			q.Instance = e.own
		}
		p.out.Quarantine = append(p.out.Quarantine, q)
		p.emitQuarantine(events.ReasonAddressQuarantined, m.Name, q, "address %s (%s) of burned member %s is in quarantine until %s",
			e.addr, q.Prefix, m.Name, q.Until.UTC().Format(time.RFC3339))
	}
}

// quarantined says member's burn put addr into quarantine already: it is put there once,
// even if its quarantine ends while the member still drains (its record is gone only a
// while after that, and then the member, still holding the address, puts it there again).
func (p *planner) quarantined(member, addr string) bool {
	return slices.ContainsFunc(p.in.Quarantine, func(q events.Quarantine) bool { return q.Proxy == member && q.Address == addr })
}

func (p *planner) emitQuarantine(reason events.Reason, member string, q events.Quarantine, format string, args ...any) {
	p.emit(reason, member, "", 0, format, args...)
	p.out.Events[len(p.out.Events)-1].Pool.Quarantine = &q
}
