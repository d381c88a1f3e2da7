package pools

import (
	"cmp"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
)

// Quota fallback across placements (issue 23 item 5, docs/pools.md#quota-fallback): a member
// whose instance waits because its placement answered Quota, or because its provider target
// fails its check (ProviderUnhealthy), puts that placement on hold. While it is held, new
// members go to the other placements, and a member stuck there is replaced successor-first at
// another; when every placement is held, members wait where they are, as without placements.
// The holds live in the pool's record, so a controller taking over keeps them.

// Hold lengths when the member's status gives no retry time of its own: a Quota answer is
// retried by the reconciler after its quota wait (5 minutes by default), a failing target is
// checked again every few seconds.
const (
	quotaHold     = 5 * time.Minute
	unhealthyHold = time.Minute
)

// stuck is a member's status when it says the member waits on its placement.
type stuck struct {
	reason  events.Reason
	message string
	retryAt time.Time
}

// stuckOf is the wait a status says, if it is one a placement's hold answers.
func stuckOf(st phaseOnly) (stuck, bool) {
	switch {
	case st.Reason == events.ReasonQuota && st.Phase == events.PhaseWaiting,
		st.Reason == events.ReasonProviderUnhealthy && st.Phase == events.PhasePending:
		return stuck{reason: st.Reason, message: st.Message, retryAt: st.RetryAt}, true
	}
	return stuck{}, false
}

// holdPlacements carries the record's holds over (dropping those whose time is up, with an
// event) and puts on hold each placement a serving member is stuck on. Holds only matter with
// two placements or more: with one, there is nowhere else to go.
func (p *planner) holdPlacements() {
	n := len(p.in.Spec.Placements)
	p.holds = map[int]*events.PlacementHold{}
	if n < 2 {
		return
	}
	if l := p.in.Ledger; l != nil {
		for _, ps := range l.Placements {
			if ps.Hold == nil || ps.Index >= n {
				continue
			}
			if s := render(*p.in.Spec, p.in.Name, ps.Index, false); s.Provider != ps.Provider || cmp.Or(s.Placement.Zone, s.Placement.Region) != ps.Zone {
				continue // the placements changed: the hold was on another place
			}
			if !p.in.Now.Before(ps.Hold.Until) {
				p.out.Events = append(p.out.Events, events.Event{Kind: events.KindPool, Proxy: p.in.Name, At: p.in.Now,
					Reason: events.ReasonPlacementRestored, Pool: &events.PoolEvent{Pool: p.in.Name},
					Message: fmt.Sprintf("placement %s is no longer held (%s): new members may go there again", p.where(ps.Index), ps.Hold.Reason)})
				continue
			}
			h := *ps.Hold
			p.holds[ps.Index] = &h
		}
	}
	var fresh []int
	for _, m := range p.members {
		s, ok := p.in.Stuck[m.Name]
		if !ok || !active(m) || m.Placement >= n || p.ready(m.Name) {
			continue
		}
		until := p.in.Now.Add(unhealthyHold)
		if s.reason == events.ReasonQuota {
			until = p.in.Now.Add(quotaHold)
			if s.retryAt.After(p.in.Now) {
				until = s.retryAt
			}
		}
		if h := p.holds[m.Placement]; h != nil {
			if until.After(h.Until) {
				h.Until = until // still answering so: the hold runs on
			}
			continue
		}
		p.holds[m.Placement] = &events.PlacementHold{Reason: s.reason, Message: s.message, Member: m.Name, Since: p.in.Now, Until: until}
		fresh = append(fresh, m.Placement)
	}
	// Said once all holds are known, so that each event names where new members go now.
	for _, i := range fresh {
		h := p.holds[i]
		to := p.spread("")
		if p.avoid(to) || to == i {
			to = -1
		}
		msg := fmt.Sprintf("placement %s answered %s (%s): ", p.where(i), h.Reason, h.Message)
		if to < 0 {
			msg += "every placement is held; members wait where they are"
		} else {
			msg += fmt.Sprintf("new members go to placement %s until %s", p.where(to), h.Until.UTC().Format(time.RFC3339))
		}
		p.out.Events = append(p.out.Events, events.Event{Kind: events.KindPool, Proxy: p.in.Name, At: p.in.Now,
			Reason: events.ReasonPlacementFallback, Message: msg,
			Pool: &events.PoolEvent{Pool: p.in.Name, Member: h.Member, Fallback: &events.PlacementFallback{From: i, To: to, Hold: *h}}})
	}
}

// avoid reports whether new members stay away from placement i: it is held and some other
// placement is not.
func (p *planner) avoid(i int) bool {
	if p.holds[i] == nil {
		return false
	}
	for j := range p.in.Spec.Placements {
		if p.holds[j] == nil {
			return true
		}
	}
	return false
}

// movable is a serving member stuck on a held placement that another placement could take.
func (p *planner) movable(m events.PoolMember) bool {
	_, stuckHere := p.in.Stuck[m.Name]
	return stuckHere && active(m) && !p.ready(m.Name) && p.avoid(m.Placement)
}

func (p *planner) moveMessage(m events.PoolMember) string {
	return fmt.Sprintf("its placement %s is held (%s): a member at another placement takes its place",
		p.where(m.Placement), p.in.Stuck[m.Name].reason)
}

// where names placement i: "1 (gcp europe-west1-b)".
func (p *planner) where(i int) string {
	s := render(*p.in.Spec, p.in.Name, i, false)
	return fmt.Sprintf("%d (%s)", i, placeName(s.Provider, cmp.Or(s.Placement.Zone, s.Placement.Region)))
}

func placeName(provider, zone string) string {
	if zone == "" {
		return provider
	}
	return provider + " " + zone
}

// placements is each placement with its serving members and its hold, for the record; nil
// for a pool without placements.
func (p *planner) placements() []events.PlacementStatus {
	spec := *p.in.Spec
	if len(spec.Placements) == 0 {
		return nil
	}
	out := make([]events.PlacementStatus, len(spec.Placements))
	for i := range out {
		s := render(spec, p.in.Name, i, false)
		out[i] = events.PlacementStatus{Index: i, Provider: s.Provider, Zone: cmp.Or(s.Placement.Zone, s.Placement.Region), Hold: p.holds[i]}
	}
	for _, m := range p.members {
		if active(m) && m.Placement < len(out) {
			out[m.Placement].Members++
			if p.ready(m.Name) {
				out[m.Placement].Ready++
			}
		}
	}
	return out
}

// heldMessage says which placements are held and where new members go, or "" when none is.
func (p *planner) heldMessage() string {
	for i := range p.in.Spec.Placements {
		if h := p.holds[i]; h != nil && p.avoid(i) {
			return fmt.Sprintf("placement %s is held (%s) until %s: new members go to placement %s",
				p.where(i), h.Reason, h.Until.UTC().Format(time.RFC3339), p.where(p.spread("")))
		}
	}
	return ""
}
