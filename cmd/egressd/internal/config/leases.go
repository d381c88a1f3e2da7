package config

import (
	"fmt"
	"time"

	"github.com/egressd/egressd/workers/leaser"
)

// leasesConfig is the `leases:` block: defaults of the lease service (docs/leases.md).
type leasesConfig struct {
	// MaxPerHolder caps the leases one holder may hold at once on the proxies of one pool
	// (and on those in no pool); a pool's leases.maxPerHolder overrides it. 0: no cap.
	MaxPerHolder int `yaml:"maxPerHolder"`
	// MaxWaitSeconds bounds an acquire's waitSeconds (docs/leases.md#waiting); unset: 60,
	// 0: acquires never wait. At most leaser.MaxWaitLimit, under the 2m for which the NATS
	// server lets the leaser answer a request (allow_responses in deploy/nats).
	MaxWaitSeconds *int `yaml:"maxWaitSeconds"`
	// DemandWindow is the sliding window the leasers count refusals and grants over in their
	// demand records (docs/pools.md#demand); 0: leaser.DefaultDemandWindow.
	DemandWindow configDuration `yaml:"demandWindow"`
}

// maxPerHolder is the configured default holder limit (0: none).
func (c File) MaxPerHolder() int {
	if c.Leases == nil {
		return 0
	}
	return c.Leases.MaxPerHolder
}

// MaxWait is the leaser's bound on waitSeconds: leaser.DefaultMaxWait when unset,
// leaser.WaitsOff for 0.
func (c File) MaxWait() time.Duration {
	switch {
	case c.Leases == nil || c.Leases.MaxWaitSeconds == nil:
		return leaser.DefaultMaxWait
	case *c.Leases.MaxWaitSeconds == 0:
		return leaser.WaitsOff
	}
	return time.Duration(*c.Leases.MaxWaitSeconds) * time.Second
}

// DemandWindow is the configured demand window (0: the default).
func (c File) DemandWindow() time.Duration {
	if c.Leases == nil {
		return 0
	}
	return time.Duration(c.Leases.DemandWindow)
}

func (c File) validateLeases() error {
	if n := c.MaxPerHolder(); n < 0 || n > leaser.MaxPerHolderLimit {
		return fmt.Errorf("leases.maxPerHolder: must be between 0 (no cap) and %d, got %d", leaser.MaxPerHolderLimit, n)
	}
	if c.Leases != nil && c.Leases.MaxWaitSeconds != nil {
		if n, limit := *c.Leases.MaxWaitSeconds, int(leaser.MaxWaitLimit/time.Second); n < 0 || n > limit {
			return fmt.Errorf("leases.maxWaitSeconds: must be between 0 (acquires never wait) and %d (the NATS server lets the leaser answer a request for 2m), got %d", limit, n)
		}
	}
	if w := c.DemandWindow(); w != 0 && (w < time.Second || w%time.Second != 0 || w > time.Hour) {
		return fmt.Errorf("leases.demandWindow: must be whole seconds between 1s and 1h, got %s", w)
	}
	return nil
}
