package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// Defaults of autoscale.
const (
	DefaultScaleDownAfterSeconds = 300
	DefaultTargetUtilization     = 0.8
	DefaultScaleDownStep         = 1
	MaxScaleDownAfterSeconds     = 86400
	MaxWaitTargetSeconds         = 3600
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
	// Spares is the idle Ready members kept above what demand asks for: a number, or "auto",
	// sized from the grant rate and the measured boot time so that an acquire rarely waits
	// longer than WaitTargetSeconds (docs/pools.md#spares). Absent: none.
	Spares            Spares `json:"spares,omitzero"`
	WaitTargetSeconds int    `json:"waitTargetSeconds,omitempty"`
}

// Spares is autoscale.spares: "auto" or a count. It decodes any JSON string or number, so
// that validate names the field with what it must be; other JSON is a type error.
type Spares struct {
	Auto  bool
	Count int
	bad   string // what was given, when it is neither "auto" nor a whole number
}

// SparesAuto is the spares value sized from boot times.
const SparesAuto = "auto"

// IsZero reports spares left out (or 0): today's behaviour.
func (s Spares) IsZero() bool { return !s.Auto && s.Count == 0 && s.bad == "" }

// UnmarshalJSON takes "auto" or a whole number; anything else string- or number-shaped is
// kept for validate to report.
func (s *Spares) UnmarshalJSON(b []byte) error {
	*s = Spares{}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		if str == SparesAuto {
			s.Auto = true
		} else {
			s.bad = strconv.Quote(str)
		}
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: reflect.TypeFor[int]()}
	}
	i, err := strconv.Atoi(n.String())
	if err != nil {
		s.bad = n.String()
		return nil
	}
	s.Count = i
	return nil
}

// jsonValueKind is how encoding/json names a value's kind in a type error.
func jsonValueKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "value"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't', b[0] == 'f':
		return "bool"
	}
	return "value"
}

// MarshalJSON writes "auto" or the count.
func (s Spares) MarshalJSON() ([]byte, error) {
	if s.Auto {
		return []byte(`"auto"`), nil
	}
	return []byte(strconv.Itoa(s.Count)), nil
}

func (s Spares) String() string {
	if s.Auto {
		return SparesAuto
	}
	return strconv.Itoa(s.Count)
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
	switch sp := a.Spares; {
	case sp.bad != "":
		bad("spares", "must be \"auto\" or a whole number of members from 0 to %d, got %s", MaxReplicas, sp.bad)
	case sp.Count < 0 || sp.Count > MaxReplicas:
		bad("spares", "must be \"auto\" or a whole number of members from 0 to %d, got %d", MaxReplicas, sp.Count)
	}
	if w := a.WaitTargetSeconds; w < 0 || w > MaxWaitTargetSeconds {
		bad("waitTargetSeconds", "must be between 0 and %d, got %d", MaxWaitTargetSeconds, w)
	} else if w > 0 && !a.Spares.Auto {
		bad("waitTargetSeconds", "applies only with spares \"auto\" (spares is %s)", a.Spares)
	}
	return errs
}
