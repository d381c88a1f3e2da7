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
	if w := c.DemandWindow(); w != 0 && (w < time.Second || w%time.Second != 0 || w > time.Hour) {
		return fmt.Errorf("leases.demandWindow: must be whole seconds between 1s and 1h, got %s", w)
	}
	return nil
}
