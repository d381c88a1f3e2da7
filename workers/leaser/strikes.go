package leaser

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// Escalation makes repeated blocks of one proxy on one target cool it down longer each time
// (docs/leases.md#escalating-cooldowns). A site that blocks an address again as soon as its
// cooldown ends has not forgiven it; sending crawlers back at the same pace only burns
// requests. The zero value (Factor 0 or 1) is today's fixed cooldown.
type Escalation struct {
	// Factor multiplies the cooldown of each blocked report on a (proxy, target) after the
	// first within Memory of the one before: base, base×f, base×f², ...
	Factor float64
	// Cap bounds an escalated cooldown (never a cooldown a report names larger itself);
	// default the leaser's MaxCooldown.
	Cap time.Duration
	// Memory is how long a (proxy, target) remembers its blocks after the last one: the
	// strike record's TTL. Default DefaultStrikeMemory.
	Memory time.Duration
}

// DefaultStrikeMemory is how long blocks count toward the next cooldown by default.
const DefaultStrikeMemory = 24 * time.Hour

// MaxEscalationFactor bounds Factor: past it the second block already hits any cap.
const MaxEscalationFactor = 100

// on says whether blocks escalate at all.
func (e Escalation) on() bool { return e.Factor > 1 }

// escalated is the cooldown of the strikes-th block in a row (1: the first) on a base
// cooldown: base × factor^(strikes-1), at most limit, and never below base (a report that
// names a long cooldown keeps it). Whole seconds, like every cooldown.
func escalated(base time.Duration, strikes int, factor float64, limit time.Duration) time.Duration {
	if strikes <= 1 || !(factor > 1) { // NaN too
		return base
	}
	d := float64(base) * math.Pow(factor, float64(strikes-1))
	if d >= float64(limit) || math.IsInf(d, 0) || math.IsNaN(d) {
		return max(base, limit)
	}
	return max(base, time.Duration(d).Truncate(time.Second))
}

// strikesKey is the proxy_cooldowns key of a (proxy, target)'s strike record: the cooldown's
// key with a suffix parseCooldownKey refuses (a dot cannot be in the encoded target), so the
// leasers' view and the read side never take it for a cooldown.
func strikesKey(proxy, target string) string { return targetCooldownKey(proxy, target) + ".strikes" }

// strikeAttempts bounds the read-modify-write of a strike record that races another
// replica's report on the same pair.
const strikeAttempts = 4

// strike counts a blocked report on (proxy, target) and returns how many blocks in a row it
// makes (1: the first within Memory). The record is written compare-and-set, so two reports
// at once on two replicas count two.
func (l *Leaser) strike(ctx context.Context, proxy, target string, now time.Time) (int, error) {
	return l.updateStrikes(ctx, proxy, target, func(n int) int { return n + 1 }, now)
}

// forgive takes one strike off (proxy, target) after a success there; the record goes at 0.
// Only a pair this replica's view has seen struck costs a KV round trip.
func (l *Leaser) forgive(ctx context.Context, proxy, target string, now time.Time) error {
	if !l.view.struck(strikesKey(proxy, target)) {
		return nil
	}
	_, err := l.updateStrikes(ctx, proxy, target, func(n int) int { return max(n-1, 0) }, now)
	return err
}

func (l *Leaser) updateStrikes(ctx context.Context, proxy, target string, next func(int) int, now time.Time) (int, error) {
	key := strikesKey(proxy, target)
	kv := l.cfg.Buckets.Cooldowns
	for range strikeAttempts {
		var rec events.Strikes
		raw, rev, err := l.get(ctx, kv, key)
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			rev = 0
		case err != nil:
			return 0, fmt.Errorf("read strikes %s: %w", key, err)
		default:
			if json.Unmarshal(raw, &rec) != nil {
				rec = events.Strikes{} // unreadable: counted afresh, never a failed report
			}
		}
		n := next(rec.Count)
		if n == 0 {
			if rev == 0 {
				return 0, nil
			}
			err = kvstore.DeleteAt(ctx, kv, key, rev)
		} else {
			b, merr := json.Marshal(events.Strikes{V: 1, Proxy: proxy, Target: target, Count: n, LastAt: now})
			if merr != nil {
				return 0, merr
			}
			_, err = kvstore.WriteTTL(ctx, l.cfg.Buckets.JS, kv, key, b, rev, l.cfg.Escalation.Memory)
		}
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("write strikes %s: %w", key, err)
		}
		l.view.noteStrikes(key, n > 0) // this replica's next success sees it without the watch
		return n, nil
	}
	return 0, fmt.Errorf("write strikes %s: %d conflicting writes in a row", key, strikeAttempts)
}

// escalate counts a blocked report on (proxy, target) and returns its cooldown from base
// and how many blocks in a row it makes; with escalation off, base and 0 without a KV call.
func (l *Leaser) escalate(ctx context.Context, proxy, target string, base time.Duration, now time.Time) (time.Duration, int, error) {
	e := l.cfg.Escalation
	if !e.on() {
		return base, 0, nil
	}
	n, err := l.strike(ctx, proxy, target, now)
	if err != nil {
		return 0, 0, err
	}
	return escalated(base, n, e.Factor, e.Cap), n, nil
}

// check applies the defaults (on e, through the pointer) and refuses what makes no sense.
func (e *Escalation) check(maxCooldown time.Duration) error {
	if e.Factor != 0 && (e.Factor < 1 || e.Factor > MaxEscalationFactor || math.IsNaN(e.Factor)) {
		return fmt.Errorf("leaser: the cooldown escalation factor must be between 1 and %d, got %v", MaxEscalationFactor, e.Factor)
	}
	e.Cap = cmp.Or(e.Cap, maxCooldown)
	e.Memory = cmp.Or(e.Memory, DefaultStrikeMemory)
	switch {
	case e.Cap < time.Second || e.Cap%time.Second != 0 || e.Cap > maxCooldown:
		return fmt.Errorf("leaser: the escalated cooldown cap must be whole seconds between 1s and MaxCooldown %v, got %v", maxCooldown, e.Cap)
	case e.Memory < time.Second || e.Memory%time.Second != 0:
		return fmt.Errorf("leaser: the strike memory must be whole seconds of at least 1s, got %v", e.Memory)
	}
	return nil
}

// checkCooldowns refuses default cooldowns above MaxCooldown and checks the escalation,
// applying its defaults.
func (cfg *Config) checkCooldowns() error {
	if cfg.BlockedCooldown > cfg.MaxCooldown || cfg.FailedCooldown > cfg.MaxCooldown {
		return fmt.Errorf("leaser: default cooldowns must not exceed MaxCooldown %v", cfg.MaxCooldown)
	}
	if cfg.Pace < 0 || cfg.Pace > MaxPace || cfg.Pace%time.Second != 0 {
		return fmt.Errorf("leaser: the pace must be whole seconds between 0 and %v, got %v", MaxPace, cfg.Pace)
	}
	n := cfg.Neighbours
	if n.V4Bits < 0 || n.V4Bits > 32 || n.V6Bits < 0 || n.V6Bits > 128 || n.Cooldown < 0 || n.Cooldown > cfg.MaxCooldown || n.Cooldown%time.Second != 0 {
		return fmt.Errorf("leaser: neighbourhood prefixes must be 0–32 (IPv4) and 0–128 (IPv6) bits and its cooldown whole seconds up to MaxCooldown, got %+v", n)
	}
	return cfg.Escalation.check(cfg.MaxCooldown)
}
