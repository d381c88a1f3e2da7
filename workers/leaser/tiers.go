package leaser

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// Tiers on the server (docs/leases.md#tiers, decision 95): an acquire with ordered selectors
// is granted on the tier its target is at. Where a target stands is a record in lease_state
// per target and list of tiers (events.TierState), read with each tiered acquire and written
// compare-and-set by the blocked reports that move it up and the acquire that probes it
// down, so every replica sees one tier per target. Its times are the leasers' clock
// (Config.Now); its TTL, the tier memory, only collects what nobody asks for any more.
type Tiers struct {
	// Blocks is how many blocked reports on a target at its tier move it up one; default
	// DefaultTierBlocks. After a probe down, one block moves it back up until a quiet period
	// has passed.
	Blocks int
	// Quiet is how long a target above the first tier must go without a block before an
	// acquire probes the tier below; default DefaultTierQuiet.
	Quiet time.Duration
	// Memory is how long a target's tier is kept after its last change; default
	// DefaultTierMemory. A target unseen that long starts at the first tier again.
	Memory time.Duration
}

// Tier defaults and bounds.
const (
	DefaultTierBlocks = 3
	DefaultTierQuiet  = 30 * time.Minute
	DefaultTierMemory = 24 * time.Hour
	MaxTierBlocks     = 1000
	MaxTierPeriod     = 30 * 24 * time.Hour
)

// check applies the defaults and refuses what makes no sense.
func (t *Tiers) check() error {
	t.Blocks = cmp.Or(t.Blocks, DefaultTierBlocks)
	t.Quiet = cmp.Or(t.Quiet, DefaultTierQuiet)
	t.Memory = cmp.Or(t.Memory, DefaultTierMemory)
	switch {
	case t.Blocks < 1 || t.Blocks > MaxTierBlocks:
		return fmt.Errorf("leaser: tier blocks must be between 1 and %d, got %d", MaxTierBlocks, t.Blocks)
	case t.Quiet < time.Second || t.Quiet%time.Second != 0 || t.Quiet > MaxTierPeriod:
		return fmt.Errorf("leaser: the tier quiet period must be whole seconds between 1s and %v, got %v", MaxTierPeriod, t.Quiet)
	case t.Memory < t.Quiet || t.Memory%time.Second != 0 || t.Memory > MaxTierPeriod:
		return fmt.Errorf("leaser: the tier memory must be whole seconds between the quiet period %v and %v, got %v", t.Quiet, MaxTierPeriod, t.Memory)
	}
	return nil
}

// tierKey is the lease_state key of target's state in tiers: the target encoded, and a hash
// of the tiers, so that crawlers with different lists for one site do not move each other.
func tierKey(target string, tiers []map[string]string) string {
	h := sha256.New()
	for _, t := range tiers {
		b, _ := json.Marshal(t) // map keys sorted: one spelling per selector
		h.Write(b)
		h.Write([]byte{0})
	}
	return "tier." + base64.RawURLEncoding.EncodeToString([]byte(target)) + "." + hex.EncodeToString(h.Sum(nil)[:8])
}

// checkTiers checks an acquire's tiers: each merged with the selector stays a selector.
func checkTiers(r events.AcquireRequest) error {
	switch {
	case r.Tiers == nil:
		return nil
	case len(r.Tiers) == 0 || len(r.Tiers) > events.MaxTiers:
		return badRequest("tiers", "tiers must list 1 to %d selectors, has %d", events.MaxTiers, len(r.Tiers))
	case r.Target == "":
		return badRequest("tiers", "tiers move a target between selectors: they need target")
	case r.WaitSeconds > 0:
		return badRequest("waitSeconds", "waitSeconds cannot be combined with tiers: a tiered acquire answers at once")
	}
	for i, t := range r.Tiers {
		field := fmt.Sprintf("tiers[%d]", i)
		if len(t)+len(r.Selector) > maxSelectorLen {
			return badRequest(field, "%s with the selector must have at most %d entries, has %d", field, maxSelectorLen, len(t)+len(r.Selector))
		}
		for k, v := range t {
			if k == "" || len(k) > maxStringLen || len(v) > maxStringLen {
				return badRequest(field, "%s: keys must be 1 to %d bytes and values at most %d", field, maxStringLen, maxStringLen)
			}
			if sv, ok := r.Selector[k]; ok && sv != v {
				return badRequest(field, "%s: %s=%q contradicts the selector's %s=%q", field, k, truncate(v, 40), k, truncate(sv, 40))
			}
		}
	}
	return nil
}

// tierStart is where an acquire for a target in state st (nil: none) starts at now, and why;
// probe is true when that is a move down the acquire must record.
func (l *Leaser) tierStart(st *events.TierState, now time.Time) (tier int, reason events.TierReason, probe bool) {
	if st == nil {
		return 0, events.TierCheapest, false
	}
	quietFrom := st.Since
	if st.LastBlockAt.After(quietFrom) {
		quietFrom = st.LastBlockAt
	}
	if st.Tier > 0 && !now.Before(quietFrom.Add(l.cfg.Tiers.Quiet)) {
		return st.Tier - 1, events.TierProbe, true
	}
	return st.Tier, cmp.Or(st.Reason, events.TierCheapest), false
}

// readTier reads the tier state of key: nil and revision 0 when there is none (or it does
// not decode, which starts the target afresh).
func (l *Leaser) readTier(ctx context.Context, key string) (*events.TierState, uint64, error) {
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, key)
	if errors.Is(err, kvstore.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read tier %s: %w", key, err)
	}
	var st events.TierState
	if json.Unmarshal(raw, &st) != nil {
		return nil, rev, nil
	}
	return &st, rev, nil
}

// writeTier writes st at rev (0: create), with the tier memory as its TTL.
func (l *Leaser) writeTier(ctx context.Context, key string, st events.TierState, rev uint64) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = kvstore.WriteTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, key, b, rev, l.cfg.Tiers.Memory)
	return err
}

// tierAttempts bounds the read-modify-writes of a tier state that races another replica.
const tierAttempts = 4

// startTier reads where r's target stands and returns the tier to start at and why. A probe
// down is recorded first (compare-and-set): of two replicas probing at once one moves the
// target, and the other starts where that one put it.
func (l *Leaser) startTier(ctx context.Context, key string, n int, target string) (int, *events.TierState, bool, error) {
	for range tierAttempts {
		st, rev, err := l.readTier(ctx, key)
		if err != nil {
			return 0, nil, false, err
		}
		if st != nil && (st.Of != n || st.Tier >= n) {
			st = nil // another list under the same hash cannot be; a record that does not fit starts afresh
		}
		now := l.now()
		tier, reason, probe := l.tierStart(st, now)
		cur := events.TierState{V: 1, Target: target, Of: n, Tier: tier, Reason: reason}
		if st != nil {
			cur.Since = st.Since
		}
		if !probe {
			return tier, &cur, false, nil
		}
		cur.Since = now
		err = l.writeTier(ctx, key, cur, rev)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, nil, false, fmt.Errorf("write tier %s: %w", key, err)
		}
		return tier, &cur, true, nil
	}
	return 0, nil, false, fmt.Errorf("write tier %s: %d conflicting writes in a row", key, tierAttempts)
}

// acquireTiered grants r on the tier its target is at, or, when that tier has nothing free,
// on the first tier above it that has (a fallback, which does not move the target). A
// refusal on every tier is the starting tier's.
func (l *Leaser) acquireTiered(ctx context.Context, r events.AcquireRequest, ttl time.Duration) (any, error) {
	n := len(r.Tiers)
	key := tierKey(r.Target, r.Tiers)
	start, st, probed, err := l.startTier(ctx, key, n, r.Target)
	if err != nil {
		return nil, err
	}
	var first error
	for i := start; i < n; i++ {
		tr := r
		tr.Tiers = nil
		tr.Selector = maps.Clone(r.Selector)
		if tr.Selector == nil {
			tr.Selector = map[string]string{}
		}
		maps.Copy(tr.Selector, r.Tiers[i])
		lt := &events.LeaseTier{Key: key, Index: i, Of: n}
		g, err := l.acquireOn(ctx, tr, ttl, lt)
		if err == nil {
			lr := g.(events.LeaseReply)
			if probed && i == start {
				l.stats.tierMoved(l.view.originOf(lr.Lease.Proxy).inTier(lt), lr.Lease.Proxy, r.Target, false)
			}
			c := &events.TierChoice{Tier: i + 1, Of: n, Selector: r.Tiers[i], Reason: st.Reason, Since: st.Since}
			if i > start {
				c.Reason, c.Since = events.TierFallback, time.Time{}
			}
			lr.Lease.Tier = c
			return lr, nil
		}
		var ae *apiError
		if !errors.As(err, &ae) || (ae.code != events.CodeUnavailable && ae.code != events.CodeTooMany) {
			return nil, err
		}
		first = cmp.Or(first, err)
	}
	return nil, first
}

// tierBlocked counts a blocked report on a lease granted in tiers and moves its target up when
// the blocks say so; it returns the target's tier after it (0-based) and whether it moved. A
// block on another tier than the target's (a fallback, or a lease from before a move) moves
// nothing.
func (l *Leaser) tierBlocked(ctx context.Context, lt events.LeaseTier, target string, now time.Time) (int, bool, error) {
	for range tierAttempts {
		st, rev, err := l.readTier(ctx, lt.Key)
		if err != nil {
			return 0, false, err
		}
		cur := events.TierState{V: 1, Target: target, Of: lt.Of, Reason: events.TierCheapest, Since: now}
		if st != nil && st.Of == lt.Of && st.Tier < lt.Of {
			cur = *st
		}
		if cur.Tier != lt.Index {
			return cur.Tier, false, nil
		}
		probing := cur.Reason == events.TierProbe && now.Before(cur.Since.Add(l.cfg.Tiers.Quiet))
		cur.Blocks, cur.LastBlockAt = cur.Blocks+1, now
		moved := (cur.Blocks >= l.cfg.Tiers.Blocks || probing) && cur.Tier+1 < cur.Of
		if moved {
			cur.Tier, cur.Reason, cur.Since, cur.Blocks, cur.LastBlockAt = cur.Tier+1, events.TierBlocked, now, 0, time.Time{}
		}
		err = l.writeTier(ctx, lt.Key, cur, rev)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("write tier %s: %w", lt.Key, err)
		}
		if moved {
			l.log.Info("target moved up a tier after blocks", "target", target, "tier", cur.Tier+1, "of", cur.Of)
		}
		return cur.Tier, moved, nil
	}
	return 0, false, fmt.Errorf("write tier %s: %d conflicting writes in a row", lt.Key, tierAttempts)
}

// BestForTarget tunes the best-for-target strategy (docs/leases.md#best-for-target).
type BestForTarget struct {
	// Explore is the share of best-for-target acquires that try a proxy without history on
	// their target first, 0 to 1; nil: selection.DefaultExplore.
	Explore *float64
	// HalfLife is how long until what a proxy did for a target weighs half; default
	// selection.DefaultHalfLife.
	HalfLife time.Duration
}

// check applies the defaults and refuses what makes no sense.
func (b *BestForTarget) check() error {
	if b.Explore == nil {
		b.Explore = new(selection.DefaultExplore)
	}
	b.HalfLife = cmp.Or(b.HalfLife, selection.DefaultHalfLife)
	switch e := *b.Explore; {
	case !(e >= 0 && e <= 1):
		return fmt.Errorf("leaser: the best-for-target explore share must be between 0 and 1, got %v", e)
	case b.HalfLife < time.Second || b.HalfLife%time.Second != 0 || b.HalfLife > MaxTierPeriod:
		return fmt.Errorf("leaser: the best-for-target half-life must be whole seconds between 1s and %v, got %v", MaxTierPeriod, b.HalfLife)
	}
	return nil
}
