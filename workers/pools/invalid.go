package pools

import (
	"cmp"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// refused is what the reconciler would refuse in the pool's members (schemas.Catalog, the
// rule it applies to every proxy), and the reason it would give: such a pool is Invalid and
// creates nothing, instead of creating members that are Invalid.
func refused(spec schemas.PoolSpec, cat schemas.Catalog) (events.Reason, error) {
	err := spec.CheckCatalog(cat)
	if err == nil {
		return "", nil
	}
	providers := []string{spec.Template.Provider}
	if len(spec.Placements) > 0 {
		providers = providers[:0]
		for i := range spec.Placements {
			providers = append(providers, spec.Place(i).Provider)
		}
	}
	if slices.ContainsFunc(providers, cat.Unknown) {
		return events.ReasonUnknownProvider, err
	}
	return events.ReasonInvalidPlacement, err
}

// invalid records a spec that cannot be acted on. Nothing is created, changed or deleted:
// members made by the last valid one stay as they are, as a Deployment's pods do. The event
// is news only once: when the pool turns Invalid, or its problems change.
func (p *planner) invalid() {
	reason := cmp.Or(p.in.SpecReason, events.ReasonInvalidSpec)
	// One line, as the read model shows a spec error (its problems joined with "; ").
	msg := strings.ReplaceAll(p.in.SpecErr.Error(), "\n", "; ")
	if l := p.in.Ledger; l == nil || l.Phase != events.PoolInvalid || l.Reason != reason || l.Message != msg {
		p.emit(reason, "", "", 0, "the pool is invalid, nothing is created, changed or deleted: %s", msg)
	}
	p.record(events.PoolInvalid, reason, msg)
}
