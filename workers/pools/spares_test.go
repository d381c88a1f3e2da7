package pools

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

func TestPoissonQuantile(t *testing.T) {
	for _, tc := range []struct {
		mean float64
		want int
	}{
		{0, 0}, {-1, 0},
		{0.05, 0}, // P(0) = 0.951: no arrival 95 times in 100
		{1, 3},    // P(≤2) = 0.920, P(≤3) = 0.981
		{4, 8},    // P(≤7) = 0.949, P(≤8) = 0.979
		{20, 28},  // P(≤27) = 0.948, P(≤28) = 0.966
		{100, 117},
		{400, 433}, // normal: 400 + 1.645 × 20 = 432.9
	} {
		if got := poissonQuantile(tc.mean, sparesConfidence); got != tc.want {
			t.Errorf("Q95(Poisson(%g)) = %d, want %d", tc.mean, got, tc.want)
		}
	}
}

func TestSparesFor(t *testing.T) {
	auto := func(wait int) schemas.Autoscale {
		a := autoscaleSpec(0, 50, 60, 1, 0.8)
		a.Spares, a.WaitTargetSeconds = schemas.Spares{Auto: true}, wait
		return a
	}
	fixed := autoscaleSpec(0, 50, 60, 1, 0.8)
	fixed.Spares = schemas.Spares{Count: 2}
	boot := &events.BootStats{Samples: 10, P50Seconds: 15, P90Seconds: 20}
	for _, tc := range []struct {
		name   string
		a      schemas.Autoscale
		per    int
		grants float64
		boot   *events.BootStats
		want   int
		words  string
	}{
		{name: "fixed", a: fixed, per: 4, grants: 3, boot: boot, want: 2, words: "fixed: 2"},
		{name: "auto without a boot", a: auto(0), per: 1, grants: 3, want: 0, words: "no boot measured"},
		{name: "auto without grants", a: auto(0), per: 1, boot: boot, want: 0, words: "no grants"},
		{name: "auto hides the whole boot", a: auto(0), per: 1, grants: 1, boot: boot, want: 28, words: "20 arrivals, 28 at 95%"},
		{name: "auto, four slots a member", a: auto(0), per: 4, grants: 1, boot: boot, want: 7, words: "7 members of 4 slots"},
		{name: "auto, a wait target takes its share", a: auto(16), per: 1, grants: 1, boot: boot, want: 8, words: "less wait target 16s"},
		{name: "auto, boot within the wait target", a: auto(30), per: 1, grants: 5, boot: boot, want: 0, words: "within the wait target"},
		{name: "auto, a slow trickle", a: auto(0), per: 2, grants: 0.05, boot: boot, want: 2, words: "1 arrivals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, words := sparesFor(tc.a, tc.per, tc.grants, tc.boot)
			if got != tc.want || !strings.Contains(words, tc.words) {
				t.Fatalf("spares %d (%q), want %d (%q)", got, words, tc.want, tc.words)
			}
		})
	}
}

// Spares in the decision: on top of the demand's members, within max, only while there is
// demand, shown in the inputs and the event's words; none configured changes nothing.
func TestScaleDecideSpares(t *testing.T) {
	with := func(sp schemas.Spares, wait int) schemas.Autoscale {
		a := autoscaleSpec(0, 10, 60, 1, 1)
		a.Spares, a.WaitTargetSeconds = sp, wait
		return a
	}
	boot := &events.BootStats{Samples: 5, P50Seconds: 8, P90Seconds: 10}
	for _, tc := range []struct {
		name   string
		in     scaleIn
		want   int
		spares int
		words  string
	}{
		{name: "no spares: as before", in: scaleIn{Spec: with(schemas.Spares{}, 0), MaxLeases: 1, Current: 2, Members: 2, Ready: 2, Held: 2,
			Demand: events.DemandSum{GrantsPerSecond: 1}, Boot: boot}, want: 2},
		{name: "fixed spares on top of what is held", in: scaleIn{Spec: with(schemas.Spares{Count: 2}, 0), MaxLeases: 1, Current: 2, Members: 2, Ready: 2, Held: 2,
			Demand: events.DemandSum{GrantsPerSecond: 0.1}, Boot: boot}, want: 4, spares: 2, words: "2 → 4: 2/2 leased, target 1, 2 spares (fixed: 2)"},
		{name: "fixed spares need demand", in: scaleIn{Spec: with(schemas.Spares{Count: 2}, 0), MaxLeases: 1, Boot: boot}, want: 0},
		{name: "auto from grants and boot p90", in: scaleIn{Spec: with(schemas.Spares{Auto: true}, 0), MaxLeases: 2, Current: 1, Members: 1, Ready: 1, Held: 2,
			Demand: events.DemandSum{GrantsPerSecond: 0.3}, Boot: boot}, want: 4, spares: 3, words: "3 spares (auto: 0.3 grants/s over 10s"},
		{name: "auto within max", in: scaleIn{Spec: with(schemas.Spares{Auto: true}, 0), MaxLeases: 1, Current: 3, Members: 3, Ready: 3, Held: 3,
			Demand: events.DemandSum{GrantsPerSecond: 5}, Boot: boot}, want: 10, spares: 62},
		{name: "auto without a boot yet", in: scaleIn{Spec: with(schemas.Spares{Auto: true}, 0), MaxLeases: 1, Current: 1, Members: 1, Ready: 1, Held: 1,
			Demand: events.DemandSum{GrantsPerSecond: 1}}, want: 1},
		{name: "auto, wait target above the boot", in: scaleIn{Spec: with(schemas.Spares{Auto: true}, 10), MaxLeases: 1, Current: 1, Members: 1, Ready: 1, Held: 1,
			Demand: events.DemandSum{GrantsPerSecond: 1}, Boot: boot}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := scaleDecide(tc.in)
			if out.Desired != tc.want || out.State.Inputs.Spares != tc.spares {
				t.Fatalf("desired %d spares %d (%s), want %d and %d", out.Desired, out.State.Inputs.Spares, out.State.Inputs.SparesFrom, tc.want, tc.spares)
			}
			if !strings.Contains(out.Decision, tc.words) {
				t.Fatalf("decision %q, want it to say %q", out.Decision, tc.words)
			}
		})
	}
}
