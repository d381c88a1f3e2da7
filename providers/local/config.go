package local

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
)

// Config configures a local provider. Field errors from Validate name the fields as the
// YAML config spells them.
type Config struct {
	// StateDir holds one directory per instance; required. It is created on first use.
	StateDir string `json:"stateDir" yaml:"stateDir"`
	// Addresses is the pool instances take their listen address from, one address per
	// instance: single IPs ("10.0.0.5"), inclusive ranges ("127.0.1.1-127.0.4.250") or
	// CIDRs ("127.0.1.0/24", its host addresses); at most 65,536 in all (see addresses.go).
	// Default: 127.0.0.2-127.0.0.254.
	Addresses []string `json:"addresses,omitempty" yaml:"addresses"`
	// BindSource makes each proxy leave from its own address, so that it has its own egress
	// IP. Default: true for non-loopback addresses, false for loopback ones.
	BindSource *bool `json:"bindSource,omitempty" yaml:"bindSource"`
	// MaxConcurrentOps is the host's concurrency in the catalog. Default 2.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty" yaml:"maxConcurrentOps"`
	// Binary is the program that runs the forward proxy. Default: this program. Binary and
	// BinaryArgs are for tests and embedders, not the YAML config (yaml:"-": a config naming
	// them is refused as an unknown key).
	Binary string `json:"binary,omitempty" yaml:"-"`
	// BinaryArgs precede the forward-proxy flags. Default (nil): ["forward-proxy"]; an empty
	// non-nil slice means no arguments, for a dedicated binary.
	BinaryArgs []string `json:"binaryArgs,omitempty" yaml:"-"`
}

const (
	// DefaultAddresses is the pool when Config.Addresses is empty: loopback addresses, which
	// every Linux host routes to itself without any set-up.
	DefaultAddresses     = "127.0.0.2-127.0.0.254"
	defaultMaxOps        = 2
	maxPoolSize          = 1 << 16
	defaultForwardSubcmd = "forward-proxy"
)

// Validate checks the config; its errors name the field.
func (c Config) Validate() error {
	_, err := c.pool()
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("stateDir: is required"))
	}
	if err != nil {
		errs = append(errs, err)
	}
	if c.MaxConcurrentOps < 0 {
		errs = append(errs, fmt.Errorf("maxConcurrentOps: must not be negative, got %d", c.MaxConcurrentOps))
	}
	return errors.Join(errs...)
}

func (c Config) maxOps() int {
	if c.MaxConcurrentOps == 0 {
		return defaultMaxOps
	}
	return c.MaxConcurrentOps
}

func (c Config) binaryArgs() []string {
	if c.BinaryArgs == nil {
		return []string{defaultForwardSubcmd}
	}
	return c.BinaryArgs
}

func (c Config) stateDir() (string, error) {
	return filepath.Abs(c.StateDir)
}

// bindSource says whether an instance on addr leaves from addr.
func (c Config) bindSource(addr netip.Addr) bool {
	if c.BindSource != nil {
		return *c.BindSource
	}
	return !addr.IsLoopback()
}
