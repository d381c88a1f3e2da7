package pools

import (
	"fmt"
	"math"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Spares (issue 23 item 4, docs/pools.md#spares, decision 83): idle Ready members kept above
// what demand asks for, so that a crawler arriving while the pool grows finds a free slot
// instead of waiting a boot. With "auto" their number comes from the grant rate and the
// pool's measured boot times:
//
//	T      = max(boot p90 − waitTargetSeconds, 0)   the part of a boot an acquire must not wait
//	slots  = Q95(Poisson(grants/s × T))              acquires arriving within T, 95 times in 100
//	spares = ⌈slots ÷ maxLeases⌉
//
// A member the autoscaler starts when the free slots run low is Ready one boot later; the
// spares cover the acquires that arrive meanwhile, less the wait allowed.

// sparesConfidence is the share of boot-length intervals whose arrivals the spares cover.
const sparesConfidence = 0.95

// z95 is the standard normal quantile of sparesConfidence, for large means.
const z95 = 1.6448536269514722

// sparesFor is the spare members a pool keeps, and how that number came about in words.
func sparesFor(a schemas.Autoscale, per int, grants float64, boot *events.BootStats) (int, string) {
	sp := a.Spares
	switch {
	case !sp.Auto:
		return sp.Count, fmt.Sprintf("fixed: %d", sp.Count)
	case boot == nil || boot.Samples == 0:
		return 0, "auto: no boot measured yet"
	case grants <= 0:
		return 0, "auto: no grants in the window"
	}
	t := max(boot.P90Seconds-float64(a.WaitTargetSeconds), 0)
	if t == 0 {
		return 0, fmt.Sprintf("auto: boot p90 %gs is within the wait target %ds", boot.P90Seconds, a.WaitTargetSeconds)
	}
	mean := grants * t
	slots := poissonQuantile(mean, sparesConfidence)
	n := (slots + per - 1) / per
	return n, fmt.Sprintf("auto: %.3g grants/s over %.3gs (boot p90 %gs less wait target %ds): %.3g arrivals, %d at 95%%: %d members of %d slots",
		grants, t, boot.P90Seconds, a.WaitTargetSeconds, mean, slots, n, per)
}

// poissonQuantile is the least k with P(X ≤ k) ≥ q for X ~ Poisson(mean): exact up to a mean
// of 100 (the terms underflow far above it), the normal approximation beyond.
func poissonQuantile(mean, q float64) int {
	switch {
	case mean <= 0 || math.IsNaN(mean):
		return 0
	case mean > 100 || math.IsInf(mean, 1):
		return int(math.Ceil(min(mean+z95*math.Sqrt(mean), 1e9)))
	}
	term := math.Exp(-mean)
	cdf, k := term, 0
	for cdf < q {
		k++
		term *= mean / float64(k)
		cdf += term
	}
	return k
}
