package local

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Config configures a local provider. Field errors from Validate name the fields as the
// YAML config spells them.
type Config struct {
	// StateDir holds one directory per instance; required. It is created on first use.
	StateDir string `json:"stateDir"`
	// Addresses is the pool instances take their listen address from, one address per
	// instance: single IPs ("10.0.0.5") or inclusive ranges ("127.0.0.2-127.0.0.254").
	// Default: 127.0.0.2-127.0.0.254.
	Addresses []string `json:"addresses,omitempty"`
	// BindSource makes each proxy leave from its own address, so that it has its own egress
	// IP. Default: true for non-loopback addresses, false for loopback ones.
	BindSource *bool `json:"bindSource,omitempty"`
	// MaxConcurrentOps is the host's concurrency in the catalog. Default 2.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty"`
	// Binary is the program that runs the forward proxy. Default: this program.
	Binary string `json:"binary,omitempty"`
	// BinaryArgs precede the forward-proxy flags. Default (nil): ["forward-proxy"]; an empty
	// non-nil slice means no arguments, for a dedicated binary.
	BinaryArgs []string `json:"binaryArgs,omitempty"`
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

// pool expands Addresses into the ordered list of addresses instances may take.
func (c Config) pool() ([]netip.Addr, error) {
	entries := c.Addresses
	if len(entries) == 0 {
		entries = []string{DefaultAddresses}
	}
	var pool []netip.Addr
	seen := map[netip.Addr]bool{}
	for i, e := range entries {
		field := fmt.Sprintf("addresses[%d]", i)
		first, last, err := parseRange(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		for a := first; ; a = a.Next() {
			if seen[a] {
				return nil, fmt.Errorf("%s: %s is already in the pool", field, a)
			}
			if len(pool) == maxPoolSize {
				return nil, fmt.Errorf("%s: the pool would hold more than %d addresses", field, maxPoolSize)
			}
			seen[a] = true
			pool = append(pool, a)
			if a == last {
				break
			}
		}
	}
	return pool, nil
}

func parseRange(s string) (first, last netip.Addr, err error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	first, err = parseAddr(lo)
	if err != nil {
		return first, last, err
	}
	if !isRange {
		return first, first, nil
	}
	last, err = parseAddr(hi)
	switch {
	case err != nil:
		return first, last, err
	case first.Is4() != last.Is4():
		return first, last, fmt.Errorf("range %q mixes IPv4 and IPv6", s)
	case last.Less(first):
		return first, last, fmt.Errorf("range %q ends before it starts", s)
	}
	return first, last, nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return a, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
		return a, fmt.Errorf("%s cannot be a listen address", a)
	}
	return a.Unmap(), nil
}
