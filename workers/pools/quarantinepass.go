package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// statusAddr is what a member's status says of where it is: its address, since when, and
// where its traffic should leave from.
type statusAddr struct {
	ip, expected string
	port         int
	since        time.Time
}

// readQuarantine reads address_quarantine whole, fresh: only a pass that needs it (a burn
// pending, a replacement to check) does, which is rare, so no watch is kept for it.
func (c *Controller) readQuarantine(ctx context.Context) ([]events.Quarantine, error) {
	m, err := kvstore.Latest(ctx, c.cfg.Buckets.Quarantine)
	if err != nil {
		return nil, fmt.Errorf("read the quarantine: %w", err)
	}
	out := make([]events.Quarantine, 0, len(m))
	for _, k := range sortedKeys(m) {
		var q events.Quarantine
		if json.Unmarshal(m[k].Value(), &q) == nil {
			out = append(out, q)
		}
	}
	return out, nil
}

// needsEgress says whether a pass of a pool with quarantine must know its members' egress: a
// member is burned or about to be, or replaced one that was.
func needsEgress(in input) bool {
	if quarantineOf(in.Spec) == nil {
		return false
	}
	for _, n := range in.Blocked {
		if n >= in.Spec.Recycle.BlockedTargets {
			return true
		}
	}
	if in.Ledger != nil {
		for _, m := range in.Ledger.Members {
			if m.QuarantineRound > 0 || (m.Retire == events.ReasonBurned && !m.Deleting) {
				return true
			}
		}
	}
	return false
}

// egresses is where each named member leaves from: what its last probe at its current
// address saw (proxy_health, read fresh), else its status's expected egress or address.
func (c *Controller) egresses(ctx context.Context, v *view, names []string) (map[string]egress, error) {
	out := map[string]egress{}
	for _, n := range names {
		v.mu.Lock()
		st, ok := v.addrs[n]
		v.mu.Unlock()
		if !ok || st.ip == "" {
			continue
		}
		e := egress{addr: st.expected, own: st.ip}
		if e.addr == "" {
			e.addr = st.ip
		}
		var h events.ProxyHealth
		_, err := kvstore.GetJSON(ctx, c.cfg.Buckets.Health, n, &h)
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("read health of %s: %w", n, err)
		case h.EgressIP != "" && h.About(net.JoinHostPort(st.ip, strconv.Itoa(st.port)), st.since):
			e = egress{addr: h.EgressIP, observed: true, own: st.ip}
		}
		out[n] = e
	}
	return out, nil
}

// quarantineSlack keeps a record a little past its until, so that a reader whose clock is
// slightly behind still sees it end by until rather than by the TTL.
const quarantineSlack = time.Minute

// writeQuarantine records the plan's quarantine before its ledger: a burned member is never
// retired (and later deleted, its address freed) without its address in quarantine first.
func (c *Controller) writeQuarantine(ctx context.Context, qs []events.Quarantine) error {
	for _, q := range qs {
		b, err := json.Marshal(q)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, writeBudget)
		_, err = kvstore.PutTTL(wctx, c.cfg.Buckets.JS, c.cfg.Buckets.Quarantine, events.QuarantineKey(q.Address), b, 0,
			q.Until.Sub(q.At)+quarantineSlack)
		cancel()
		if err != nil {
			return fmt.Errorf("quarantine %s: %w", q.Address, err)
		}
	}
	return nil
}
