package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
)

// Lease is a held proxy lease that renews itself until Release. Its fields do not change:
// renewals keep the ID.
type Lease struct {
	ID    string
	Proxy string
	Host  string
	Port  int
	// URL is the grant's http://[user:pass@]host:port, for an HTTP client's Proxy or curl -x;
	// do not log it. On a proxy with auth.mode "lease" its credentials are a token that
	// expires with the grant, and each renewal hands out a new one: use CurrentURL.
	URL string
	// Egress is where the proxy's traffic leaves from, as the service knew it at the grant
	// (address, provider, region, zone, attributes); nil from a service that predates it.
	Egress *events.LeaseEgress
	// Tier is, for an acquire with tiers, the tier granted (1 is the first) and why.
	Tier *events.TierChoice

	c       *Client
	stop    context.CancelFunc
	done    chan struct{} // closed when the renewal goroutine has returned
	lost    chan struct{}
	mu      sync.Mutex
	expires time.Time
	url     string // the latest grant's or renewal's URL
	ttl     time.Duration
	err     error
}

// Acquire leases a proxy and keeps the lease renewed (at a third of its TTL) until Release
// or until it is lost.
func (c *Client) Acquire(ctx context.Context, o AcquireOptions) (*Lease, error) {
	sent := time.Now()
	g, err := c.AcquireOnce(ctx, o)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	l := &Lease{ID: g.ID, Proxy: g.Proxy, Host: g.Host, Port: g.Port, URL: g.URL, Egress: g.Egress, Tier: g.Tier, c: c, stop: stop,
		done: make(chan struct{}), lost: make(chan struct{}), expires: g.ExpiresAt, url: g.URL, ttl: time.Duration(g.TTLSeconds) * time.Second}
	go l.keepAlive(rctx, sent)
	return l, nil
}

// String names the lease without its credentials.
func (l *Lease) String() string { return "lease " + l.ID + " on " + l.Proxy }

// ExpiresAt is when the lease runs out unless renewed (the service's clock).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// CurrentURL is the URL of the latest renewal (or of the grant, before the first): with
// auth.mode "lease" the one whose token is valid longest. A request made with an older
// token still passes until that token's own expiry, so switching late leaves no gap.
func (l *Lease) CurrentURL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.url
}

// Credentials are CurrentURL's username and password (empty on a proxy without auth), for
// clients that take them as fields, such as a browser's proxy settings. Do not log them.
func (l *Lease) Credentials() (username, password string) {
	u, err := url.Parse(l.CurrentURL())
	if err != nil || u.User == nil {
		return "", ""
	}
	password, _ = u.User.Password()
	return u.User.Username(), password
}

// HTTPProxy is for http.Transport's Proxy: the lease's CurrentURL, so that a transport
// follows the renewals' tokens by itself.
func (l *Lease) HTTPProxy(*http.Request) (*url.URL, error) { return url.Parse(l.CurrentURL()) }

// Lost is closed when the lease is lost: a renewal was refused (errors.Is(Err(), ErrLost) or
// ErrNotFound; ErrEnded when the service ended it because its proxy was deleted or replaced,
// with the *Error's End saying which), or none got through before the TTL ran out
// (ErrExpired). Release does not close it.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is why the lease was lost, nil while it is not.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release stops the renewals and ends the lease. Releasing a lost or already released lease
// is not an error.
func (l *Lease) Release(ctx context.Context) error {
	l.stopRenewing()
	_, err := l.c.Release(ctx, l.ID)
	return err
}

// Report tells the service how the proxy did (see Client.Report); with AndRelease the
// renewals stop once the service has released the lease.
func (l *Lease) Report(ctx context.Context, result Result, target string, opts ...ReportOption) (events.ReportReply, error) {
	r, err := l.c.Report(ctx, l.ID, result, target, opts...)
	if err == nil && r.Released {
		l.stopRenewing()
	}
	return r, err
}

func (l *Lease) stopRenewing() {
	l.stop()
	<-l.done
}

// keepAlive renews at a third of the TTL. A refusal loses the lease at once; other failures
// (timeouts, no responders while the service restarts) are retried sooner, until the TTL
// counted from the last renewal sent has passed on this machine's clock.
func (l *Lease) keepAlive(ctx context.Context, lastSent time.Time) {
	defer close(l.done)
	ttl := max(l.ttl, time.Second)
	next := ttl / 3
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		g, err := l.c.Renew(rctx, l.ID, 0)
		cancel()
		var se *Error
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			ttl = max(time.Duration(g.TTLSeconds)*time.Second, time.Second)
			l.mu.Lock()
			l.expires, l.url = g.ExpiresAt, g.URL
			l.mu.Unlock()
			lastSent, next = sent, ttl/3
		case errors.As(err, &se) && !Retryable(se):
			l.markLost(err)
			return
		case time.Since(lastSent) >= ttl:
			l.markLost(expired(err))
			return
		default:
			next = min(ttl/10, time.Until(lastSent.Add(ttl))/2)
			next = max(next, 50*time.Millisecond)
		}
	}
}

func (l *Lease) markLost(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(l.lost)
}
