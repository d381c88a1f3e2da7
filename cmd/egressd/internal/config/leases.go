package config

import (
	"fmt"

	"github.com/egressd/egressd/workers/leaser"
)

// leasesConfig is the `leases:` block: defaults of the lease service (docs/leases.md).
type leasesConfig struct {
	// MaxPerHolder caps the leases one holder may hold at once on the proxies of one pool
	// (and on those in no pool); a pool's leases.maxPerHolder overrides it. 0: no cap.
	MaxPerHolder int `yaml:"maxPerHolder"`
}

// maxPerHolder is the configured default holder limit (0: none).
func (c File) MaxPerHolder() int {
	if c.Leases == nil {
		return 0
	}
	return c.Leases.MaxPerHolder
}

func (c File) validateLeases() error {
	if n := c.MaxPerHolder(); n < 0 || n > leaser.MaxPerHolderLimit {
		return fmt.Errorf("leases.maxPerHolder: must be between 0 (no cap) and %d, got %d", leaser.MaxPerHolderLimit, n)
	}
	return nil
}
