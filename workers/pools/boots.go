package pools

import (
	"math"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
)

// Boot times (issue 23 item 4): a member's boot is from its spec's put to its first Ready, as
// the reconciler stamps them on its status (createdAt, readyAt: one clock). The pass records
// each member's boot once in the pool's record, the last events.BootSamples of them, so that
// the spares computed from them (spares.go) survive a takeover.

// bootOf is a status's boot, if the proxy has been Ready.
func bootOf(st phaseOnly) (time.Duration, bool) {
	if st.CreatedAt.IsZero() || st.ReadyAt.IsZero() {
		return 0, false
	}
	return max(st.ReadyAt.Sub(st.CreatedAt), 0), true
}

// recordBoots carries the record's boots over and adds those of the members Ready for the
// first time, each once (the member's Booted mark).
func (p *planner) recordBoots() {
	if l := p.in.Ledger; l != nil {
		p.boots = slices.Clone(l.Boots)
	}
	for i := range p.members {
		m := &p.members[i]
		d, ok := p.in.Boot[m.Name]
		if m.Booted || !ok {
			continue
		}
		m.Booted = true
		p.boots = append(p.boots, events.BootSample{Member: m.Name, Placement: m.Placement,
			Seconds: math.Round(d.Seconds()*1000) / 1000, At: p.in.Now})
	}
	if n := len(p.boots) - events.BootSamples; n > 0 {
		p.boots = slices.Delete(p.boots, 0, n)
	}
}

// bootStats is the p50 and p90 of the boots, nil without any.
func bootStats(boots []events.BootSample) *events.BootStats {
	if len(boots) == 0 {
		return nil
	}
	s := make([]float64, len(boots))
	for i, b := range boots {
		s[i] = b.Seconds
	}
	slices.Sort(s)
	return &events.BootStats{Samples: len(s), P50Seconds: quantile(s, 0.5), P90Seconds: quantile(s, 0.9)}
}

// quantile of sorted values by the nearest rank: a boot that happened, never a value between
// two (with few samples, p90 is the slowest but one of ten).
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
