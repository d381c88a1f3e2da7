package schemas

import (
	"fmt"
	"math"
)

// Defaults of autoscale.
const (
	DefaultScaleDownAfterSeconds = 300
	DefaultTargetUtilization     = 0.8
	DefaultScaleDownStep         = 1
	MaxScaleDownAfterSeconds     = 86400
)

// Autoscale sets a pool's member count from the demand the leasers measure (docs/pools.md
// #autoscale): up at once when acquires wait or are refused, or when the leases held pass
// targetUtilization of what the Ready members serve; down, by at most scaleDownStep members a
// pass and only idle ones, once demand has stayed low for scaleDownAfterSeconds.
type Autoscale struct {
	Min                   *int    `json:"min"`
	Max                   *int    `json:"max"`
	ScaleDownAfterSeconds int     `json:"scaleDownAfterSeconds,omitempty"`
	TargetUtilization     float64 `json:"targetUtilization,omitempty"`
	ScaleDownStep         int     `json:"scaleDownStep,omitempty"`
}

// applyDefaults fills the optional fields of a (non-nil) autoscale.
func (a *Autoscale) applyDefaults() {
	if a == nil {
		return
	}
	if a.ScaleDownAfterSeconds == 0 {
		a.ScaleDownAfterSeconds = DefaultScaleDownAfterSeconds
	}
	if a.TargetUtilization == 0 {
		a.TargetUtilization = DefaultTargetUtilization
	}
	if a.ScaleDownStep == 0 {
		a.ScaleDownStep = DefaultScaleDownStep
	}
}

// validate checks an autoscale whose defaults are applied, each problem naming its field.
func (a Autoscale) validate() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: "autoscale." + field, Problem: fmt.Sprintf(format, args...)})
	}
	lo, hi := -1, -1
	switch {
	case a.Min == nil:
		bad("min", "is required (0 to %d; 0 scales the pool to zero when idle)", MaxReplicas)
	case *a.Min < 0 || *a.Min > MaxReplicas:
		bad("min", "must be between 0 and %d, got %d", MaxReplicas, *a.Min)
	default:
		lo = *a.Min
	}
	switch {
	case a.Max == nil:
		bad("max", "is required (1 to %d)", MaxReplicas)
	case *a.Max < 1 || *a.Max > MaxReplicas:
		bad("max", "must be between 1 and %d, got %d", MaxReplicas, *a.Max)
	default:
		hi = *a.Max
	}
	if lo >= 0 && hi >= 0 && lo > hi {
		bad("max", "must be at least min (%d), got %d", lo, hi)
	}
	if d := a.ScaleDownAfterSeconds; d < 1 || d > MaxScaleDownAfterSeconds {
		bad("scaleDownAfterSeconds", "must be between 1 and %d, got %d", MaxScaleDownAfterSeconds, d)
	}
	if u := a.TargetUtilization; math.IsNaN(u) || u <= 0 || u > 1 {
		bad("targetUtilization", "must be above 0 and at most 1, got %g", u)
	}
	if st := a.ScaleDownStep; st < 1 || st > MaxReplicas {
		bad("scaleDownStep", "must be between 1 and %d, got %d", MaxReplicas, st)
	}
	return errs
}
