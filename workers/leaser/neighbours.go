package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// Neighbours is the neighbour-aware cooldown (docs/leases.md#neighbours): sites block by
// neighbourhood (an IPv4 /24, an IPv6 /64, a provider's range), so a block on one proxy says
// its neighbours are likely next. Each blocked report also cools the proxy's neighbours for
// the target, for a shorter time.
type Neighbours struct {
	selection.Neighbourhood
	// Cooldown is the neighbours' cooldown; 0: a quarter of the block's (at least 1s).
	Cooldown time.Duration
}

// maxNeighbours bounds the cooldowns one block writes (a /24 has 254 addresses).
const maxNeighbours = 256

// neighbourCooldown is how long a block of block cools the blocked proxy's neighbours.
func (n Neighbours) neighbourCooldown(block time.Duration) time.Duration {
	if n.Cooldown > 0 {
		return min(n.Cooldown, block)
	}
	return max(time.Second, (block / 4).Truncate(time.Second))
}

// coolNeighbours cools proxy's neighbours for target after a block of length block, each
// with Create: a neighbour already cooling there (its own block, another neighbour's, a
// pace) keeps its cooldown. It returns how many it cooled; a failure stops it (the block
// itself is recorded already).
func (l *Leaser) coolNeighbours(ctx context.Context, proxy, target, holder string, block time.Duration) (int, error) {
	n := l.cfg.Neighbours
	if !n.On() {
		return 0, nil
	}
	hood, names := l.view.fleet.Neighbours(proxy, maxNeighbours)
	d := n.neighbourCooldown(block)
	until := l.now().Add(d)
	cooled := 0
	for _, name := range names {
		b, err := json.Marshal(events.Cooldown{V: 1, Proxy: name, Target: target, Result: events.CooldownNeighbour,
			Holder: holder, Until: until, Because: proxy, Neighbourhood: hood})
		if err != nil {
			return cooled, err
		}
		key := targetCooldownKey(name, target)
		rev, err := kvstore.CreateTTL(ctx, l.cfg.Buckets.Cooldowns, key, b, d)
		if errors.Is(err, kvstore.ErrConflict) {
			continue
		}
		if err != nil {
			return cooled, fmt.Errorf("cool neighbour %s: %w", key, err)
		}
		l.view.noteCooldown(key, rev, true, until)
		cooled++
	}
	return cooled, nil
}

// crowded are, when neighbourhoods are on and r names its holder and target, the
// neighbourhoods where the holder already holds a lease for the target; else none.
func (l *Leaser) crowded(r events.AcquireRequest) map[string]bool {
	if !l.cfg.Neighbours.On() || r.Holder == "" || r.Target == "" {
		return nil
	}
	return l.view.fleet.Crowded(r.Holder, r.Target)
}
