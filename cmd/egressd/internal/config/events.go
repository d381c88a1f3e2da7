package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"go.yaml.in/yaml/v3"
)

// eventsConfig is the `events:` block: the limits of the history streams, which `egressd
// setup` (and the all-in-one at start) declares, and what the leasers write to them. A key
// left out takes its default.
type eventsConfig struct {
	Lifecycle streamLimitsConfig `yaml:"lifecycle"`
	Leases    leaseEventsConfig  `yaml:"leases"`
	Stats     statsConfig        `yaml:"stats"`
}

type streamLimitsConfig struct {
	MaxAge   configDuration `yaml:"maxAge"`
	MaxBytes byteSize       `yaml:"maxBytes"`
}

// leaseEventsConfig adds to the lease stream's limits which lease events are stored one by
// one (events.RawLeaseEvents).
type leaseEventsConfig struct {
	streamLimitsConfig `yaml:",inline"`
	Raw                events.RawLeaseEvents `yaml:"raw"`
}

// statsConfig adds to the statistics stream's limits how often each leaser publishes.
type statsConfig struct {
	streamLimitsConfig `yaml:",inline"`
	Interval           configDuration `yaml:"interval"`
}

// LeaseHistory is what the leasers write: the raw mode and the statistics interval (zero:
// the defaults).
func (c File) LeaseHistory() (events.RawLeaseEvents, time.Duration) {
	if c.Events == nil {
		return "", 0
	}
	return c.Events.Leases.Raw, time.Duration(c.Events.Stats.Interval)
}

// validateLeaseHistory names the key of a bad raw mode or interval.
func (c File) validateLeaseHistory() error {
	raw, interval := c.LeaseHistory()
	var errs []error
	if raw != "" && !slices.Contains(events.RawLeaseEventModes, raw) {
		errs = append(errs, fmt.Errorf("events.leases.raw: %q is not one of %v", raw, events.RawLeaseEventModes))
	}
	if interval != 0 && (interval < time.Second || interval%time.Second != 0) {
		errs = append(errs, fmt.Errorf("events.stats.interval: must be whole seconds of at least 1s, got %s", interval))
	}
	return errors.Join(errs...)
}

// EventLimits are the limits the config asks for (zero: the defaults).
func (c File) EventLimits() kvstore.EventLimits {
	if c.Events == nil {
		return kvstore.EventLimits{}
	}
	conv := func(s streamLimitsConfig) kvstore.StreamLimits {
		return kvstore.StreamLimits{MaxAge: time.Duration(s.MaxAge), MaxBytes: int64(s.MaxBytes)}
	}
	return kvstore.EventLimits{Lifecycle: conv(c.Events.Lifecycle), Leases: conv(c.Events.Leases.streamLimitsConfig),
		Stats: conv(c.Events.Stats.streamLimitsConfig)}
}

// configDuration is a Go duration ("6h", "90m") or a number of days ("30d").
type configDuration time.Duration

func (d *configDuration) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.ParseFloat(days, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("line %d: duration %q: want a positive number of days before d (30d), or a Go duration (6h)", n.Line, s)
		}
		*d = configDuration(time.Duration(v * float64(24*time.Hour)))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: duration %q: want a positive Go duration (6h, 90m) or days (30d)", n.Line, s)
	}
	*d = configDuration(v)
	return nil
}

// byteSize is a number of bytes, with an optional binary unit: 1048576, 512KiB, 256MiB, 1GiB.
type byteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func (b *byteSize) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return fmt.Errorf("line %d: size %q: want a positive whole number of bytes, optionally with KiB, MiB, GiB or TiB (256MiB)", n.Line, s)
	}
	*b = byteSize(v * mult)
	return nil
}
