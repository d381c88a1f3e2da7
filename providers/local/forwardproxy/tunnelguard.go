package forwardproxy

import (
	"net"
	"sync"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
)

// Timing of the tunnel guard. Variables so that tests can shorten them.
var (
	// tunnelGrace is how long past its token's expiry (itself checked with leaseauth.Skew for
	// clock disagreement) a tunnel may run: a crawler that renewed its lease and opens new
	// tunnels with the new token loses no transfer in flight to the switch.
	tunnelGrace = leaseauth.Skew
	// revocationPoll is how often an open tunnel looks at the revocation list.
	revocationPoll = time.Second
)

// guardTunnel closes a tunnel opened with a lease token once the token is past its expiry
// plus leaseauth.Skew and tunnelGrace, or as soon as the revocation list names its lease. A
// tunnel opened with a password (or with no auth) is not guarded. The returned stop ends the
// guard and waits for it; the tunnel's handler calls it when the tunnel ends first.
func (h *handler) guardTunnel(g grant, conns ...net.Conn) (stop func()) {
	if g.subject == "" || h.auth == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		end := time.NewTimer(time.Until(g.expires.Add(leaseauth.Skew + tunnelGrace)))
		defer end.Stop()
		tick := time.NewTicker(revocationPoll)
		defer tick.Stop()
		why := ""
		for why == "" {
			select {
			case <-done:
				return
			case <-end.C:
				why = "expired"
			case <-tick.C:
				if h.auth.revokedAt(g.subject, time.Now()) != nil {
					why = "revoked"
				}
			}
		}
		h.log.Info("closing a tunnel: its lease token "+why, "lease", g.subject)
		for _, c := range conns {
			c.Close()
		}
	}()
	return func() { close(done); wg.Wait() }
}
