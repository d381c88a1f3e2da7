package fleet

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// CooldownRow is one cooldown of proxy_cooldowns: a proxy a crawler reported blocked or
// failed, kept from new leases for every target (Target "") or for the one it named, until
// Until. The leasers write it with a TTL, so the bucket forgets it by itself.
type CooldownRow struct {
	Proxy  string              `json:"proxy"`
	Target string              `json:"target,omitempty"` // "" for every target
	Result events.ReportResult `json:"result"`           // blocked or failed
	Holder string              `json:"holder,omitempty"` // who reported it
	Until  time.Time           `json:"until"`
	// Strikes is, with escalating cooldowns, how many blocks in a row on the target this
	// cooldown is (its length grew with it); 0 otherwise.
	Strikes int `json:"strikes,omitempty"`
	// Because is, for a neighbour's cooldown, the proxy whose block caused it.
	Because string `json:"because,omitempty"`
}

// Cooldowns reads proxy_cooldowns: every cooldown still running at now, by proxy, the
// proxy-wide one first, then by target. A record whose Until has passed is left out: the
// leasers no longer honour it, it only waits for its TTL. A record that does not decode, or
// names no proxy, is left out too (decodeAll), and so is a strike record (its Until is zero:
// the leasers' count of blocks in a row, which the cooldown it escalated carries as
// Strikes). A nil bucket reads as none.
func Cooldowns(ctx context.Context, kv jetstream.KeyValue, now time.Time) ([]CooldownRow, error) {
	recs, err := records(ctx, kv, func(a, b events.Cooldown) int {
		return cmp.Or(strings.Compare(a.Proxy, b.Proxy), strings.Compare(a.Target, b.Target))
	})
	if err != nil {
		return nil, err
	}
	out := []CooldownRow{}
	for _, c := range recs {
		// A pacing mark (a grant's own short cooldown for its target) is routine, not a
		// verdict on the proxy: the views of cooldowns leave it out.
		if c.Proxy == "" || !c.Until.After(now) || c.Result == events.CooldownPaced {
			continue
		}
		out = append(out, CooldownRow{Proxy: c.Proxy, Target: c.Target, Result: c.Result, Holder: c.Holder, Until: c.Until, Strikes: c.Strikes, Because: c.Because})
	}
	return slices.Clip(out), nil
}
