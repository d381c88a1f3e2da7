package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
)

// held is one lease the gateway holds for a crawler's route or session. The client renews it
// in the background; the pool releases it once idle.
type held struct {
	lease   *client.Lease
	key     string // its route's or session's key in the pool
	session bool

	// guarded by the pool's mu
	active   int                  // requests and tunnels using it now
	lastUsed time.Time            // when the last of them ended (or it was taken)
	blocked  map[string]time.Time // targets this gateway reported it blocked on, until when
	gone     bool                 // released, reported with release, or lost: never handed out again

	up atomic.Pointer[upstream] // the lease's URL as last parsed
}

// upstream is a lease's proxy URL, parsed, and the CONNECT's credentials header line.
type upstream struct {
	raw         string
	url         *url.URL
	basicAuth   string // "Basic …", the Proxy-Authorization of a plain-HTTP request, or "" without credentials
	connectAuth string // "Proxy-Authorization: Basic …\r\n", or "" for a proxy without credentials
}

// upstream returns the lease's current proxy URL, parsed once per renewal that changes it
// (a lease token renews with the lease) rather than on every request.
func (h *held) upstream() (*upstream, error) {
	raw := h.lease.CurrentURL()
	if c := h.up.Load(); c != nil && c.raw == raw {
		return c, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	c := &upstream{raw: raw, url: u}
	if u.User != nil {
		pass, _ := u.User.Password()
		c.basicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))
		c.connectAuth = "Proxy-Authorization: " + c.basicAuth + "\r\n"
	}
	h.up.Store(c)
	return c, nil
}

func (h *held) lost() bool {
	select {
	case <-h.lease.Lost():
		return true
	default:
		return false
	}
}

// leasePool holds the gateway's leases: per rotating route (holder and what the username
// asks for) at most one lease per proxy, up to maxPerRoute proxies, handed out least recently
// used first; per session one lease, on the session's proxy.
type leasePool struct {
	c           *client.Client
	ttl         time.Duration
	idle        time.Duration
	maxPerRoute int
	cooldown    time.Duration // how long a target's block is remembered here (the service's default)
	log         *slog.Logger

	mu       sync.Mutex
	routes   map[string][]*held
	sessions map[string]*held
	refused  map[string]time.Time // route key → no new acquire before (a 503 or 429 just came)
	asking   map[string]bool      // route key → an acquire for one more proxy is in flight
	closed   bool
}

func newLeasePool(c *client.Client, ttl, idle time.Duration, maxPerRoute int, log *slog.Logger) *leasePool {
	return &leasePool{c: c, ttl: ttl, idle: idle, maxPerRoute: maxPerRoute, cooldown: 10 * time.Minute, log: log,
		routes: map[string][]*held{}, sessions: map[string]*held{}, refused: map[string]time.Time{}, asking: map[string]bool{}}
}

// routeKey is a route's identity in the pool: the holder and everything the username asks for.
func routeKey(holder string, r Route) string {
	var b strings.Builder
	b.WriteString(holder)
	for _, k := range slices.Sorted(maps.Keys(r.Selector)) {
		b.WriteString("\x00" + k + "=" + r.Selector[k])
	}
	b.WriteString("\x00" + string(r.Strategy) + "\x00" + string(r.MinAnonymity))
	return b.String()
}

// stickyKey is the lease service's session key: the holder's name in front, so two crawlers'
// sessions named alike are two sessions.
func stickyKey(holder, session string) string { return holder + "/" + session }

var errPoolClosed = errors.New("the gateway is shutting down")

// take hands out a lease for one request or tunnel to target, never on a proxy in avoid; done
// must follow. Acquire errors are the lease service's (*client.Error).
func (p *leasePool) take(ctx context.Context, holder string, r Route, target string, avoid []string) (*held, error) {
	if r.Session != "" {
		return p.takeSession(ctx, holder, r, target)
	}
	key := routeKey(holder, r)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	var best *held
	proxies := 0
	for _, h := range p.routes[key] {
		if h.gone || h.lost() {
			continue
		}
		proxies++
		if slices.Contains(avoid, h.lease.Proxy) || h.blockedOn(target) {
			continue
		}
		if best == nil || h.lastUsed.Before(best.lastUsed) {
			best = h
		}
	}
	// One request at a time asks for one more proxy; the others meanwhile take what is held.
	tryNew := proxies < p.maxPerRoute && time.Now().After(p.refused[key]) && !p.asking[key]
	if best != nil && !tryNew {
		p.use(best)
		p.mu.Unlock()
		return best, nil
	}
	p.asking[key] = true
	p.mu.Unlock()
	h, err := p.acquireRoute(ctx, key, holder, r, target)
	p.mu.Lock()
	delete(p.asking, key)
	p.mu.Unlock()
	if err == nil || best == nil {
		return h, err
	}
	// Nothing new to be had: the least recently used held lease does.
	p.mu.Lock()
	defer p.mu.Unlock()
	if best.gone {
		return nil, err
	}
	p.use(best)
	return best, nil
}

// acquireRoute leases a proxy for a rotating route. A proxy the route holds already is
// held a moment while the route asks again (its lease now counts against it, so the service
// offers another, even when its view of a lease given back is a moment late), then given
// back: after duplicateTries the fleet has no other proxy for the route now, and the route
// stops asking a moment.
func (p *leasePool) acquireRoute(ctx context.Context, key, holder string, r Route, target string) (*held, error) {
	var dups []*client.Lease
	defer func() {
		for _, l := range dups {
			p.releaseLease(l)
		}
	}()
	for range duplicateTries {
		l, err := p.c.Acquire(ctx, client.AcquireOptions{Selector: r.Selector, Target: target, TTL: p.ttl, Holder: holder,
			Strategy: r.Strategy, MinAnonymity: r.MinAnonymity})
		if err != nil {
			if errors.Is(err, client.ErrNoProxy) || errors.Is(err, client.ErrHolderCap) {
				p.refuse(key, refusalBackoff)
			}
			p.log.Debug("gateway: no more proxies for a route now", "holder", holder, "err", err)
			return nil, err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			dups = append(dups, l)
			return nil, errPoolClosed
		}
		if slices.ContainsFunc(p.routes[key], func(o *held) bool { return !o.gone && o.lease.Proxy == l.Proxy }) {
			p.mu.Unlock()
			p.log.Debug("gateway: offered a proxy the route holds", "holder", holder, "proxy", l.Proxy)
			dups = append(dups, l)
			continue
		}
		h := &held{lease: l, key: key}
		p.routes[key] = append(p.routes[key], h)
		p.use(h)
		p.mu.Unlock()
		return h, nil
	}
	p.refuse(key, duplicateBackoff)
	return nil, client.ErrNoProxy
}

// duplicateTries bounds the acquires of one request that return proxies the route holds.
const duplicateTries = 3

// How long a route makes do with what it holds: after a refusal (503, 429), and after the
// service offered only proxies it holds. A lease the route gives up ends the wait: the fleet
// it asks of has changed.
const (
	refusalBackoff   = time.Second
	duplicateBackoff = time.Second
)

// refuse stops the route from asking for new leases for d.
func (p *leasePool) refuse(key string, d time.Duration) {
	p.mu.Lock()
	p.refused[key] = time.Now().Add(d)
	p.mu.Unlock()
}

// takeSession hands out the session's lease, acquiring it (the lease service keeps the
// session on its proxy, across gateways and restarts) when the gateway holds none usable for
// target.
func (p *leasePool) takeSession(ctx context.Context, holder string, r Route, target string) (*held, error) {
	key := stickyKey(holder, r.Session)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	old := p.sessions[key]
	if old != nil && !old.gone && !old.lost() && !old.blockedOn(target) {
		p.use(old)
		p.mu.Unlock()
		return old, nil
	}
	p.mu.Unlock()
	l, err := p.c.Acquire(ctx, client.AcquireOptions{Selector: r.Selector, Target: target, TTL: p.ttl, Holder: holder,
		Strategy: r.Strategy, MinAnonymity: r.MinAnonymity, Sticky: key, Session: r.SessionTTL, StickyMode: r.StickyMode})
	if err != nil {
		return nil, err
	}
	h := &held{lease: l, key: key, session: true}
	p.mu.Lock()
	cur := p.sessions[key]
	if p.closed || (cur != nil && cur != old && !cur.gone && !cur.lost() && cur.lease.Proxy == l.Proxy) {
		// Another request of the session got there first, on the same proxy: use its lease.
		if !p.closed {
			p.use(cur)
		}
		p.mu.Unlock()
		p.releaseLease(l)
		if p.closed {
			return nil, errPoolClosed
		}
		return cur, nil
	}
	p.sessions[key] = h
	p.use(h)
	retire := cur != nil && cur.active == 0 && !cur.gone
	if cur != nil {
		cur.gone = true
	}
	p.mu.Unlock()
	if retire {
		p.releaseLease(cur.lease)
	}
	return h, nil
}

func (h *held) blockedOn(target string) bool { return time.Now().Before(h.blocked[target]) }

// use counts a request on h; mu is held.
func (p *leasePool) use(h *held) {
	h.active++
	h.lastUsed = time.Now()
}

// done ends one use of h.
func (p *leasePool) done(h *held) {
	p.mu.Lock()
	h.active--
	h.lastUsed = time.Now()
	release := h.gone && h.active == 0 && !p.closed
	p.mu.Unlock()
	if release {
		p.releaseLease(h.lease)
	}
}

// report tells the lease service a rule hit on h for target, and what follows here: the
// gateway hands the lease out no more for target (blocked) or at all (failed), and a session's
// lease is given back so the session's next request moves (soft) or is refused (strict).
func (p *leasePool) report(ctx context.Context, h *held, result events.ReportResult, target string) {
	var opts []client.ReportOption
	p.mu.Lock()
	if result == events.ReportFailed || h.session {
		h.gone = true
		opts = append(opts, client.AndRelease())
	} else {
		if h.blocked == nil {
			h.blocked = map[string]time.Time{}
		}
		h.blocked[target] = time.Now().Add(p.cooldown)
	}
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := h.lease.Report(rctx, result, target, opts...); err != nil {
		p.log.Warn("gateway: report to the lease service failed", "lease", h.lease.ID, "proxy", h.lease.Proxy,
			"result", result, "target", target, "err", err)
	}
}

// drop gives a lease up that did not work (the proxy refused its credentials).
func (p *leasePool) drop(h *held) {
	p.mu.Lock()
	h.gone = true
	p.mu.Unlock()
}

// releaseLease ends a lease within a budget of its own: called where the request's context
// may be gone.
func (p *leasePool) releaseLease(l *client.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		p.log.Warn("gateway: release failed; the lease runs out at its TTL", "lease", l.ID, "proxy", l.Proxy, "err", err)
	}
}

// reap releases the leases idle for p.idle, and forgets the lost and the given back.
func (p *leasePool) reap(now time.Time) {
	var out []*client.Lease
	p.mu.Lock()
	keep := func(h *held) bool {
		switch {
		case h.active > 0:
			return true
		case h.gone:
			return false
		case h.lost() || now.Sub(h.lastUsed) >= p.idle:
			h.gone = true
			out = append(out, h.lease)
			return false
		}
		return true
	}
	for key, hs := range p.routes {
		n := len(hs)
		if hs = slices.DeleteFunc(hs, func(h *held) bool { return !keep(h) }); len(hs) < n {
			delete(p.refused, key)
		}
		if len(hs) == 0 {
			delete(p.routes, key)
		} else {
			p.routes[key] = hs
		}
	}
	for key, h := range p.sessions {
		if !keep(h) {
			delete(p.sessions, key)
		}
	}
	p.mu.Unlock()
	for _, l := range out {
		p.releaseLease(l)
	}
}

// run reaps until ctx ends, then releases every lease the pool holds.
func (p *leasePool) run(ctx context.Context) {
	t := time.NewTicker(max(p.idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.close()
			return
		case now := <-t.C:
			p.reap(now)
		}
	}
}

// close releases every lease; what is in flight is released as it ends.
func (p *leasePool) close() {
	p.mu.Lock()
	p.closed = true
	var out []*client.Lease
	for _, hs := range p.routes {
		for _, h := range hs {
			if !h.gone {
				h.gone = true
				out = append(out, h.lease)
			}
		}
	}
	for _, h := range p.sessions {
		if !h.gone {
			h.gone = true
			out = append(out, h.lease)
		}
	}
	p.mu.Unlock()
	for _, l := range out {
		p.releaseLease(l)
	}
}
