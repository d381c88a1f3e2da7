package leaser

import (
	"net"
	"net/url"
	"strconv"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// grant is the reply form of a lease. Its URL carries the credentials the holder presents
// to the proxy; it goes to the holder only, never to a log or an event:
//
//   - auth.mode "static": the spec's username and password, escaped by url.UserPassword;
//   - auth.mode "lease": the lease ID and a token signed with the key of the proxy's current
//     instance (internal/leaseauth; the instance's generation, from its status), valid until
//     this grant's or renewal's expiry, so every renewal hands out a fresh one while the
//     previous one runs out on its own, or is revoked when the lease ends early (revoke.go).
func (l *Leaser) grant(id string, rec events.Lease, t selection.Endpoint) events.LeaseGrant {
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(t.IP, strconv.Itoa(t.Port))}
	switch {
	case t.Auth.Lease():
		u.User = url.UserPassword(l.cfg.LeaseMaster.InstanceKey(rec.Proxy, t.Generation).Sign(id, rec.ExpiresAt))
	case t.Auth != nil:
		u.User = url.UserPassword(t.Auth.Username, t.Auth.Password)
	}
	g := events.LeaseGrant{ID: id, Proxy: rec.Proxy, Host: t.IP, Port: t.Port, URL: u.String(),
		ExpiresAt: rec.ExpiresAt, TTLSeconds: rec.TTLSeconds, Egress: &t.Egress}
	if u.User != nil {
		g.Username = u.User.Username()
		g.Password, _ = u.User.Password()
	}
	return g
}
