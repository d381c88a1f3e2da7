package fleet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// PoolPending is the phase a reader shows for a pool whose spec the controller has not
// recorded a status for yet. The controller never writes it.
const PoolPending events.PoolPhase = "Pending"

// PoolPhases is every phase a pool row can have, in the order a summary lists them.
var PoolPhases = []events.PoolPhase{
	PoolPending, events.PoolInvalid, events.PoolProgressing, events.PoolReady, events.PoolDegraded, events.PoolDeleting,
}

// PoolRow is one pool: its spec (as far as readers need it), the controller's status, and
// the members counted from the fleet's rows.
type PoolRow struct {
	Name  string           `json:"name"`
	Phase events.PoolPhase `json:"phase"`
	// Desired is the spec's replicas; null while there is no spec, it does not parse, or it
	// is not readable (then the controller's last Replicas is in Status).
	Desired *int `json:"desired"`
	// Members are the proxies the pool owns: rows whose spec names it as owner, or, without
	// a readable spec, rows its ledger lists. Ready, Leased (slots held) and Draining
	// (marked drain or in phase Draining) count among them.
	Members  int `json:"members"`
	Ready    int `json:"ready"`
	Leased   int `json:"leased"`
	Draining int `json:"draining"`
	// OldestAt is when its oldest member was created (the ledger's time, which rotation
	// goes by, else the row's); Oldest is its age, "-" without members.
	OldestAt     time.Time     `json:"oldestAt,omitzero"`
	Oldest       string        `json:"oldest"`
	NextRotation time.Time     `json:"nextRotation,omitzero"`
	Reason       events.Reason `json:"reason,omitempty"`
	Message      string        `json:"message,omitempty"`
	// Suspect is the brake while it holds the pool: so many of its members are Unhealthy at
	// once that none is replaced for health (the members' statuses say so; the pool's own
	// status is the controller's and does not).
	Suspect *events.Suspect `json:"suspect,omitempty"`
	// Autoscale is the pool's autoscale, when it has one: its bounds and the autoscaler's last
	// decision, inputs and next possible scale-down (from the controller's record).
	Autoscale *AutoscaleRow `json:"autoscale,omitempty"`
	// Demand is what the leasers measure of the pool now, summed over them (pool_demand);
	// nil when no leaser recorded any.
	Demand *events.DemandSum `json:"demand,omitempty"`
	// Boot is the p50 and p90 of the members' last boots (spec to first Ready), and
	// Placements each placement with its members and a hold that sends new members
	// elsewhere, both from the controller's record.
	Boot       *events.BootStats        `json:"boot,omitempty"`
	Placements []events.PlacementStatus `json:"placements,omitempty"`
	// Status is the controller's record with the members' ledger, for `egressd status pools
	// -o json`; nil until the controller wrote one. It never holds the template.
	Status *events.PoolStatus `json:"status,omitempty"`
}

// AutoscaleRow is a pool's autoscale as readers show it.
type AutoscaleRow struct {
	Min int `json:"min"`
	Max int `json:"max"`
	// Spares is the spec's spares ("auto" or a count, "" for none) and WaitTargetSeconds
	// its wait target; the number computed is in State.Inputs.
	Spares            string                `json:"spares,omitempty"`
	WaitTargetSeconds int                   `json:"waitTargetSeconds,omitempty"`
	State             *events.PoolAutoscale `json:"state,omitempty"` // nil until the controller decided
}

// Text is the autoscale in one line, as every view prints it: its bounds, what demand asks
// for and from what, the last decision, and the next possible scale-down.
func (a AutoscaleRow) Text(now time.Time) string {
	out := fmt.Sprintf("autoscale %d to %d", a.Min, a.Max)
	st := a.State
	if st == nil {
		return out + ", no decision yet"
	}
	in := st.Inputs
	out += fmt.Sprintf(", wants %d (%d held of %d on %d Ready, %d waiting, %d refused, target %g)",
		in.Wanted, in.Held, in.Capacity, in.Ready, in.Waiting, in.Refused, in.Target)
	if a.Spares != "" {
		out += fmt.Sprintf("; spares %s: %d", a.Spares, in.Spares)
		if in.SparesFrom != "" {
			out += " (" + in.SparesFrom + ")"
		}
	}
	if st.LastDecision != "" {
		out += fmt.Sprintf("; last %s, %s ago", st.LastDecision, events.Age(now, st.LastDecisionAt))
	}
	if !st.NextScaleDown.IsZero() {
		out += "; next scale-down " + Until(now, st.NextScaleDown)
	}
	if st.Held != "" {
		out += "; " + st.Held
	}
	return out
}

// BootText is the members' boot times in words, "" without any measured.
func (p PoolRow) BootText() string {
	b := p.Boot
	if b == nil || b.Samples == 0 {
		return ""
	}
	return fmt.Sprintf("boot p50 %gs, p90 %gs (last %d)", b.P50Seconds, b.P90Seconds, b.Samples)
}

// PlacementsText is the members per placement and the holds, in one line, "" for a pool
// without placements: "placements 0 tight: 1 (1 Ready), held QuotaExceeded (…) until in 4m;
// 1 roomy: 2 (2 Ready)".
func (p PoolRow) PlacementsText(now time.Time) string {
	if len(p.Placements) == 0 {
		return ""
	}
	parts := make([]string, 0, len(p.Placements))
	for _, pl := range p.Placements {
		where := pl.Provider
		if pl.Zone != "" {
			where += " " + pl.Zone
		}
		part := fmt.Sprintf("%d %s: %d (%d Ready)", pl.Index, where, pl.Members, pl.Ready)
		if h := pl.Hold; h != nil {
			part += fmt.Sprintf(", held %s", h.Reason)
			if h.Message != "" {
				part += " (" + h.Message + ")"
			}
			part += " until " + Until(now, h.Until)
		}
		parts = append(parts, part)
	}
	return "placements " + strings.Join(parts, "; ")
}

// DesiredText is the DESIRED column of a pool, as every view prints it: the spec's replicas;
// "-" for a pool being deleted (its spec is gone, which is what makes the controller say
// Deleting, so it wants no members rather than an unknown number); "?" when the spec does
// not parse or cannot be read.
func (p PoolRow) DesiredText() string {
	switch {
	case p.Desired != nil:
		return strconv.Itoa(*p.Desired)
	case p.Phase == events.PoolDeleting:
		return "-"
	}
	return "?"
}

// poolFields is all the model keeps of a PoolSpec: the template, with its auth and
// user-data, never leaves decodePools.
type poolFields struct {
	valid     bool
	problem   string // why it does not parse, naming the field
	replicas  int
	autoscale *schemas.Autoscale
}

func decodePools(m map[string]jetstream.KeyValueEntry) map[string]poolFields {
	out := make(map[string]poolFields, len(m))
	for name, e := range m {
		if err := schemas.ValidPoolName(name); err != nil {
			// As the controller says it (workers/pools), so the two read alike.
			out[name] = poolFields{problem: (&schemas.FieldError{Field: "(name)", Problem: err.Error()}).Error()}
			continue
		}
		s, err := schemas.ParsePoolSpec(e.Value())
		if err != nil {
			out[name] = poolFields{problem: oneLine(err)}
			continue
		}
		if s.Autoscale != nil {
			out[name] = poolFields{valid: true, replicas: *s.Autoscale.Min, autoscale: s.Autoscale}
			continue
		}
		out[name] = poolFields{valid: true, replicas: *s.Replicas}
	}
	return out
}

// oneLine joins the problems of an errors.Join result with "; ", as a status message is one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// ownPoolless gives a row without a readable spec the pool whose ledger lists it: a member
// whose spec is being deleted, or any member for a reader not allowed to read specs.
func ownPoolless(rows map[string]*Row, in decoded) {
	for pool, st := range in.poolStatus {
		for _, m := range st.Members {
			if _, hasSpec := in.specs[m.Name]; hasSpec {
				continue
			}
			if r := rows[m.Name]; r != nil && r.Pool == "" {
				r.Pool = pool
			}
		}
	}
}

// buildPools makes a row of every pool with a spec or a status, counting its members from
// rows (already judged).
func buildPools(now time.Time, in decoded, rows []Row) []PoolRow {
	names := make([]string, 0, max(len(in.pools), len(in.poolStatus)))
	for name := range in.pools {
		names = append(names, name)
	}
	for name := range in.poolStatus {
		if _, ok := in.pools[name]; !ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	members := map[string][]*Row{}
	for i := range rows {
		if p := rows[i].Pool; p != "" {
			members[p] = append(members[p], &rows[i])
		}
	}
	suspect := SuspectPools(rows)
	out := make([]PoolRow, 0, len(names))
	for _, name := range names {
		p := PoolRow{Name: name, Oldest: "-"}
		if s, ok := suspect[name]; ok {
			p.Suspect = &s
		}
		st := in.poolStatus[name]
		spec, hasSpec := in.pools[name]
		switch {
		case hasSpec && !spec.valid:
			// The controller does nothing with it; the reader says why at once, whatever an
			// older status says.
			p.Phase, p.Reason, p.Message = events.PoolInvalid, events.ReasonInvalidSpec, spec.problem
		case st != nil:
			p.Phase, p.Reason, p.Message = st.Phase, st.Reason, st.Message
		default:
			p.Phase = PoolPending
		}
		if spec.valid {
			p.Desired, p.Autoscale = desiredOf(spec, st)
		}
		if d, ok := in.demand[name]; ok {
			p.Demand = &d
		}
		if st != nil {
			p.Status, p.NextRotation = st, st.NextRotation
			p.Boot, p.Placements = st.Boot, st.Placements
		}
		created := ledgerCreated(st)
		for _, r := range members[name] {
			p.Members++
			p.Leased += r.Leases
			switch {
			case r.Phase == events.PhaseDraining || r.Drain:
				p.Draining++
			case r.Phase == events.PhaseReady:
				p.Ready++
			}
			at, ok := created[r.Name]
			if !ok {
				at = r.CreatedAt
			}
			if !at.IsZero() && (p.OldestAt.IsZero() || at.Before(p.OldestAt)) {
				p.OldestAt = at
			}
		}
		p.Oldest = events.Age(now, p.OldestAt)
		out = append(out, p)
	}
	return out
}

// desiredOf is a valid spec's member count (the autoscaler's, with autoscale) and its
// autoscale row.
func desiredOf(spec poolFields, st *events.PoolStatus) (*int, *AutoscaleRow) {
	n := spec.replicas
	a := spec.autoscale
	if a == nil {
		return &n, nil
	}
	row := &AutoscaleRow{Min: *a.Min, Max: *a.Max, WaitTargetSeconds: a.WaitTargetSeconds}
	if !a.Spares.IsZero() {
		row.Spares = a.Spares.String()
	}
	if st != nil && st.Autoscale != nil {
		row.State = st.Autoscale
		n = st.Autoscale.Desired
	}
	return &n, row
}

func ledgerCreated(st *events.PoolStatus) map[string]time.Time {
	if st == nil {
		return nil
	}
	out := make(map[string]time.Time, len(st.Members))
	for _, m := range st.Members {
		if !m.CreatedAt.IsZero() {
			out[m.Name] = m.CreatedAt
		}
	}
	return out
}

// Until says how far ahead t is, "-" for zero and "due" once it has passed: the
// NEXT-ROTATION column.
func Until(now, t time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case !t.After(now):
		return "due"
	}
	return "in " + events.Age(t, now)
}
