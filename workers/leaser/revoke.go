package leaser

import (
	"context"
	"encoding/json"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
)

// revocationObserver is what the Observer may also count: revocations written, or not
// ("ok", "error"). *metrics.Metrics implements it.
type revocationObserver interface {
	ObserveRevocation(result string)
}

// revoke writes the revocation of a lease that ended before its last token expired, so that
// the proxy refuses its tokens within seconds rather than at their expiry
// (docs/leases.md#revocation): revoked.<lease ID> in lease_state, with a TTL that ends when
// the lease's last token would stop passing anyway. Only leases of lease-mode proxies carry
// tokens (a proxy the view no longer knows may have been one). It runs after the slot is gone:
// a revocation that fails leaves the token to run out at its expiry, never a held lease
// without access, and the release still succeeds.
func (l *Leaser) revoke(ctx context.Context, rec events.Lease, why events.Reason) {
	if t, known, _ := l.view.fleet.Endpoint(rec.Proxy, 0); known && !t.Auth.Lease() {
		return
	}
	until := rec.ExpiresAt.Add(leaseauth.Skew)
	left := until.Sub(l.now())
	if left <= 0 {
		return // every token of the lease has expired already
	}
	ttl := left.Truncate(time.Second) + time.Second // whole seconds, the server's unit, never short
	id := leaseID{Proxy: rec.Proxy, Slot: rec.Slot, Token: rec.Token}.String()
	b, err := json.Marshal(events.LeaseRevocation{V: 1, Lease: id, Proxy: rec.Proxy, Until: until, Reason: why})
	if err == nil {
		_, err = kvstore.PutTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, events.RevocationKey(id), b, 0, ttl)
	}
	obs, _ := l.cfg.Observer.(revocationObserver)
	if err != nil {
		l.log.Warn("revoke a lease's tokens; they pass until their expiry", "id", id, "until", until, "err", err)
		if obs != nil {
			obs.ObserveRevocation("error")
		}
		return
	}
	if obs != nil {
		obs.ObserveRevocation("ok")
	}
	l.log.Debug("lease tokens revoked", "id", id, "until", until)
}
