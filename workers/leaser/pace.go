package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// MaxPace bounds paceSeconds and leases.paceSeconds.
const MaxPace = time.Hour

// Pacing keeps a site from seeing one egress address come back at once: a grant for a target
// that asks for pacing is, at the same time, a cooldown of the proxy for that target, as long
// as the pace (docs/leases.md#pacing). It is written with Create, in place of the read of the
// target's cooldown key an acquire makes anyway, so the check and the mark are one atomic
// step: two acquires for one target on two replicas cannot both take the proxy, and a block
// already cooling the proxy there is never shortened by a pace.

// pace is the pacing an acquire asks for: its own paceSeconds, else the leaser's default;
// none without a target.
func (l *Leaser) pace(r events.AcquireRequest) time.Duration {
	if r.Target == "" {
		return 0
	}
	if r.PaceSeconds > 0 {
		return time.Duration(r.PaceSeconds) * time.Second
	}
	return l.cfg.Pace
}

// markPaced creates proxy's cooldown for target for pace, unless one exists. It answers
// whether the proxy was cooling down there already (blocked, or paced by another grant), and
// the revision of the mark it made (0 if none), to be given back if no grant follows.
func (l *Leaser) markPaced(ctx context.Context, proxy, target string, pace time.Duration) (cooling bool, rev uint64, err error) {
	key := targetCooldownKey(proxy, target)
	until := l.now().Add(pace)
	b, err := json.Marshal(events.Cooldown{V: 1, Proxy: proxy, Target: target, Result: events.CooldownPaced, Until: until})
	if err != nil {
		return false, 0, err
	}
	rev, err = kvstore.CreateTTL(ctx, l.cfg.Buckets.Cooldowns, key, b, pace)
	if errors.Is(err, kvstore.ErrConflict) {
		// Cooling already: learn until when, for the refusal's nextAllowedAt.
		v, crev, gerr := l.get(ctx, l.cfg.Buckets.Cooldowns, key)
		if gerr == nil {
			l.view.noteCooldown(key, crev, true, cooldownEnd(v))
		}
		return true, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("pace %s: %w", key, err)
	}
	l.view.noteCooldown(key, rev, true, until)
	return false, rev, nil
}

// unpace gives back a pacing mark whose grant did not happen (the slot was taken, the proxy
// cools down for every target). If that fails the mark only holds the proxy back for the
// pace; a block written over it since is never removed (the revision must still be ours).
func (l *Leaser) unpace(ctx context.Context, proxy, target string, rev uint64) {
	if rev == 0 {
		return
	}
	key := targetCooldownKey(proxy, target)
	if err := kvstore.DeleteAt(ctx, l.cfg.Buckets.Cooldowns, key, rev); err != nil && !errors.Is(err, kvstore.ErrConflict) {
		l.log.Warn("give back a pacing mark; it ends at its TTL", "key", key, "err", err)
	}
}
