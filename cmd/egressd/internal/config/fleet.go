package config

import (
	"errors"
	"fmt"
	"time"
)

// fleetLimits is the `limits:` block: bounds over the whole installation, beside each
// provider's own (docs/operations.md).
type fleetLimits struct {
	// MaxInstances bounds the instances of every provider together (0: no bound).
	MaxInstances int `yaml:"maxInstances"`
}

// healthConfig is the `health:` block: when the reconciler replaces an Unhealthy instance,
// and the brake that stops it when too many turn Unhealthy together (docs/operations.md).
type healthConfig struct {
	// ReplaceAfter is how long an instance stays Unhealthy before it is replaced; 0 is the
	// default, "never" never.
	ReplaceAfter string `yaml:"replaceAfter"`
	// BrakeShare is the share of a provider target's proxies (percent) that, Unhealthy
	// together, makes the target Suspect: no replacement for health reasons until it falls.
	BrakeShare *int `yaml:"brakeShare"`
	// BrakeMinimum is how many must be Unhealthy at least before the brake can hold.
	BrakeMinimum *int `yaml:"brakeMinimum"`
}

// Health is what the health block asks of the reconciler.
type Health struct {
	ReplaceAfter time.Duration // 0: the reconciler's default; negative: never
	BrakeShare   int           // percent; 0: the default
	BrakeMinimum int           // 0: the default
}

// MaxInstances is the installation's instance limit (0: none).
func (c File) MaxInstances() int {
	if c.Limits == nil {
		return 0
	}
	return c.Limits.MaxInstances
}

// HealthPolicy reads the health block; the file is valid (validateFleet passed).
func (c File) HealthPolicy() Health {
	var h Health
	if c.Health == nil {
		return h
	}
	switch c.Health.ReplaceAfter {
	case "":
	case "never":
		h.ReplaceAfter = -1
	default:
		h.ReplaceAfter, _ = time.ParseDuration(c.Health.ReplaceAfter)
	}
	if c.Health.BrakeShare != nil {
		h.BrakeShare = *c.Health.BrakeShare
	}
	if c.Health.BrakeMinimum != nil {
		h.BrakeMinimum = *c.Health.BrakeMinimum
	}
	return h
}

func (c File) validateFleet() error {
	var errs []error
	if n := c.MaxInstances(); n < 0 || n > maxLimitValue {
		errs = append(errs, fmt.Errorf("limits.maxInstances: must be between 0 (no bound) and %d, got %d", maxLimitValue, n))
	}
	if c.Health == nil {
		return errors.Join(errs...)
	}
	if r := c.Health.ReplaceAfter; r != "" && r != "never" {
		if d, err := time.ParseDuration(r); err != nil || d < time.Second || d > 7*24*time.Hour {
			errs = append(errs, fmt.Errorf("health.replaceAfter: must be \"never\" or a duration between 1s and 168h, got %q", r))
		}
	}
	if s := c.Health.BrakeShare; s != nil && (*s < 1 || *s > 100) {
		errs = append(errs, fmt.Errorf("health.brakeShare: must be a percentage between 1 and 100, got %d", *s))
	}
	if m := c.Health.BrakeMinimum; m != nil && (*m < 1 || *m > maxLimitValue) {
		errs = append(errs, fmt.Errorf("health.brakeMinimum: must be between 1 and %d, got %d", maxLimitValue, *m))
	}
	return errors.Join(errs...)
}
