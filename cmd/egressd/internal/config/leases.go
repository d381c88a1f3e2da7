package config

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/leaser/selection"
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
	// Cooldowns makes repeated blocks of a proxy on one target cool it down longer
	// (docs/leases.md#escalating-cooldowns); unset: every block the same.
	Cooldowns *cooldownsConfig `yaml:"cooldowns"`
	// PaceSeconds is the least time between two grants of one proxy for one target when an
	// acquire names none (docs/leases.md#pacing); 0 (the default): no pacing.
	PaceSeconds int `yaml:"paceSeconds"`
	// Neighbours cools a blocked proxy's neighbours for the site too
	// (docs/leases.md#neighbours); unset: a block cools only its proxy.
	Neighbours *neighboursConfig `yaml:"neighbours"`
	// BestForTarget tunes the best-for-target strategy (docs/leases.md#best-for-target);
	// unset: explore a tenth, history halves every hour.
	BestForTarget *bestForTargetConfig `yaml:"bestForTarget"`
	// Tiers tunes acquires with tiers (docs/leases.md#tiers); unset: the defaults.
	Tiers *tiersConfig `yaml:"tiers"`
}

// bestForTargetConfig is `leases.bestForTarget:`.
type bestForTargetConfig struct {
	Explore  *float64       `yaml:"explore"`  // the share of acquires that try a proxy without history first
	HalfLife configDuration `yaml:"halfLife"` // how long until what a proxy did weighs half
}

// tiersConfig is `leases.tiers:`.
type tiersConfig struct {
	Blocks int            `yaml:"blocks"` // blocked reports on a target's tier that move it up
	Quiet  configDuration `yaml:"quiet"`  // without a block this long, an acquire probes the tier below
	Memory configDuration `yaml:"memory"` // how long a target's tier is kept after its last change
}

// BestForTarget is the configured tuning of best-for-target (zero: the defaults).
func (c File) BestForTarget() leaser.BestForTarget {
	if c.Leases == nil || c.Leases.BestForTarget == nil {
		return leaser.BestForTarget{}
	}
	b := c.Leases.BestForTarget
	return leaser.BestForTarget{Explore: b.Explore, HalfLife: time.Duration(b.HalfLife)}
}

// Tiers is the configured tuning of tiers (zero: the defaults).
func (c File) Tiers() leaser.Tiers {
	if c.Leases == nil || c.Leases.Tiers == nil {
		return leaser.Tiers{}
	}
	t := c.Leases.Tiers
	return leaser.Tiers{Blocks: t.Blocks, Quiet: time.Duration(t.Quiet), Memory: time.Duration(t.Memory)}
}

// validateLearning names the field of a bad leases.bestForTarget or leases.tiers.
func (c File) validateLearning() error {
	b, t := c.BestForTarget(), c.Tiers()
	wholeUpTo := func(d time.Duration) bool {
		return d == 0 || (d >= time.Second && d%time.Second == 0 && d <= leaser.MaxTierPeriod)
	}
	switch {
	case b.Explore != nil && !(*b.Explore >= 0 && *b.Explore <= 1):
		return fmt.Errorf("leases.bestForTarget.explore: must be a share between 0 and 1, got %v", *b.Explore)
	case !wholeUpTo(b.HalfLife):
		return fmt.Errorf("leases.bestForTarget.halfLife: must be whole seconds between 1s and %s, got %s", leaser.MaxTierPeriod, b.HalfLife)
	case t.Blocks < 0 || t.Blocks > leaser.MaxTierBlocks:
		return fmt.Errorf("leases.tiers.blocks: must be between 1 and %d (0: %d), got %d", leaser.MaxTierBlocks, leaser.DefaultTierBlocks, t.Blocks)
	case !wholeUpTo(t.Quiet):
		return fmt.Errorf("leases.tiers.quiet: must be whole seconds between 1s and %s, got %s", leaser.MaxTierPeriod, t.Quiet)
	case !wholeUpTo(t.Memory) || (t.Memory != 0 && t.Memory < cmp.Or(t.Quiet, leaser.DefaultTierQuiet)):
		return fmt.Errorf("leases.tiers.memory: must be whole seconds between the quiet period and %s, got %s", leaser.MaxTierPeriod, t.Memory)
	}
	return nil
}

// neighboursConfig is `leases.neighbours:`.
type neighboursConfig struct {
	IPv4Prefix      int  `yaml:"ipv4Prefix"`      // egress addresses sharing this IPv4 prefix are neighbours
	IPv6Prefix      int  `yaml:"ipv6Prefix"`      // and this IPv6 one
	ByTarget        bool `yaml:"byTarget"`        // or: proxies on one provider target are
	CooldownSeconds int  `yaml:"cooldownSeconds"` // neighbours' cooldown; 0: a quarter of the block's
}

// Neighbours is the configured neighbour-aware cooldown (zero: off).
func (c File) Neighbours() leaser.Neighbours {
	if c.Leases == nil || c.Leases.Neighbours == nil {
		return leaser.Neighbours{}
	}
	n := c.Leases.Neighbours
	return leaser.Neighbours{Neighbourhood: selection.Neighbourhood{V4Bits: n.IPv4Prefix, V6Bits: n.IPv6Prefix, ByTarget: n.ByTarget},
		Cooldown: time.Duration(n.CooldownSeconds) * time.Second}
}

func (c File) validateNeighbours() error {
	if c.Leases == nil || c.Leases.Neighbours == nil {
		return nil
	}
	n := c.Leases.Neighbours
	switch {
	case n.IPv4Prefix < 0 || n.IPv4Prefix > 32:
		return fmt.Errorf("leases.neighbours.ipv4Prefix: must be between 0 (none) and 32, got %d", n.IPv4Prefix)
	case n.IPv6Prefix < 0 || n.IPv6Prefix > 128:
		return fmt.Errorf("leases.neighbours.ipv6Prefix: must be between 0 (none) and 128, got %d", n.IPv6Prefix)
	case n.ByTarget && (n.IPv4Prefix > 0 || n.IPv6Prefix > 0):
		return errors.New("leases.neighbours.byTarget: a neighbourhood is either the provider target or address prefixes, not both")
	case !n.ByTarget && n.IPv4Prefix == 0 && n.IPv6Prefix == 0:
		return errors.New("leases.neighbours: set ipv4Prefix, ipv6Prefix or byTarget (or leave the block out)")
	case n.CooldownSeconds < 0 || n.CooldownSeconds > int(leaser.DefaultMaxCooldown/time.Second):
		return fmt.Errorf("leases.neighbours.cooldownSeconds: must be between 0 (a quarter of the block's) and %d, got %d", int(leaser.DefaultMaxCooldown/time.Second), n.CooldownSeconds)
	}
	return nil
}

// cooldownsConfig is `leases.cooldowns:`, the escalation of blocked cooldowns.
type cooldownsConfig struct {
	Factor float64        `yaml:"factor"` // each block in a row multiplies the cooldown; 1: off
	Max    configDuration `yaml:"max"`    // the longest escalated cooldown; default 24h
	Memory configDuration `yaml:"memory"` // how long blocks count after the last; default 24h
}

// Pace is the configured default pacing (0: none).
func (c File) Pace() time.Duration {
	if c.Leases == nil {
		return 0
	}
	return time.Duration(c.Leases.PaceSeconds) * time.Second
}

// Escalation is the configured escalation of blocked cooldowns (zero: none).
func (c File) Escalation() leaser.Escalation {
	if c.Leases == nil || c.Leases.Cooldowns == nil {
		return leaser.Escalation{}
	}
	e := c.Leases.Cooldowns
	return leaser.Escalation{Factor: e.Factor, Cap: time.Duration(e.Max), Memory: time.Duration(e.Memory)}
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
	if err := c.validateEscalation(); err != nil {
		return err
	}
	if err := c.validateNeighbours(); err != nil {
		return err
	}
	if err := c.validateLearning(); err != nil {
		return err
	}
	if p := c.Pace(); p < 0 || p > leaser.MaxPace {
		return fmt.Errorf("leases.paceSeconds: must be between 0 (no pacing) and %d, got %d", int(leaser.MaxPace/time.Second), int(p/time.Second))
	}
	if w := c.DemandWindow(); w != 0 && (w < time.Second || w%time.Second != 0 || w > time.Hour) {
		return fmt.Errorf("leases.demandWindow: must be whole seconds between 1s and 1h, got %s", w)
	}
	return nil
}

func (c File) validateEscalation() error {
	e := c.Escalation()
	switch {
	case e.Factor != 0 && (e.Factor < 1 || e.Factor > leaser.MaxEscalationFactor):
		return fmt.Errorf("leases.cooldowns.factor: must be between 1 (no escalation) and %d, got %v", leaser.MaxEscalationFactor, e.Factor)
	case e.Cap != 0 && (e.Cap < time.Second || e.Cap%time.Second != 0 || e.Cap > leaser.DefaultMaxCooldown):
		return fmt.Errorf("leases.cooldowns.max: must be whole seconds between 1s and %s, got %s", leaser.DefaultMaxCooldown, e.Cap)
	case e.Memory != 0 && (e.Memory < time.Second || e.Memory%time.Second != 0 || e.Memory > 30*24*time.Hour):
		return fmt.Errorf("leases.cooldowns.memory: must be whole seconds between 1s and 30d, got %s", e.Memory)
	}
	return nil
}
