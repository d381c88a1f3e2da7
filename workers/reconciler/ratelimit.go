package reconciler

import (
	"time"

	"github.com/egressd/egressd/events"
	"golang.org/x/time/rate"
)

// A provider's create-rate limit (maxCreatesPerMinute and createBurst in its config entry,
// carried by its catalog record) is a token bucket the leader holds: a create is sent only
// with a token, and every create op takes one, a retried create included, so that a
// create-fail loop cannot run away. Clouds act against accounts that create in bursts.
//
// The bucket lives in the leader's memory, so a takeover must not hand the new leader a full
// one: it starts with the burst less the creates its statuses show were sent within the time
// the bucket takes to refill (each status records when its create began, and each create op
// when it was sent). Those statuses are written before their ops go out, so none is missed.

// createLimit is one provider's limit. Its clock never runs backwards: the limiter counts the
// time since its last event as refill, so an earlier time followed by a later one would count
// the same interval twice and mint tokens. The loop hands it monotonic readings; last clamps
// whatever else it is given.
type createLimit struct {
	perMinute, burst int
	lim              *rate.Limiter
	last             time.Time
}

// clock is now, or the latest time the bucket has seen if now is before it.
func (c *createLimit) clock(now time.Time) time.Time {
	if now.Before(c.last) {
		return c.last
	}
	c.last = now
	return now
}

// limitOf reads a catalog record's create-rate limit; ok is false when it sets none.
func limitOf(rec events.CatalogRecord) (perMinute, burst int, ok bool) {
	perMinute, burst = rec.Limits[events.LimitCreatesPerMinute], rec.Limits[events.LimitCreateBurst]
	return perMinute, max(burst, 1), perMinute > 0
}

// newCreateLimit is a bucket that has spent one token for each of recent, the times creates
// were sent.
func newCreateLimit(perMinute, burst int, recent []time.Time, now time.Time) *createLimit {
	lim := rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)
	refill := time.Duration(float64(burst) / float64(perMinute) * float64(time.Minute))
	spent := 0
	for _, at := range recent {
		if now.Sub(at) < refill {
			spent++
		}
	}
	lim.ReserveN(now, min(spent, burst))
	return &createLimit{perMinute: perMinute, burst: burst, lim: lim, last: now}
}

// wait is how long after now a create may go: 0 when a token is there now.
func (c *createLimit) wait(now time.Time) time.Duration {
	t := c.lim.TokensAt(c.clock(now))
	if t >= 1 {
		return 0
	}
	return time.Duration((1 - t) / float64(c.lim.Limit()) * float64(time.Second))
}

// took counts a create op sent at now; a create that went without a token (credentials
// delivered to a running instance) puts the bucket in debt, which later creates wait out.
func (c *createLimit) took(now time.Time) { c.lim.ReserveN(c.clock(now), 1) }

// recentCreates are the times the leader's statuses of provider show creates were sent.
func (l *loop) recentCreates(provider string) []time.Time {
	var out []time.Time
	for _, e := range l.statuses {
		st := e.st
		if st.Provider != provider {
			continue
		}
		if st.Op != nil && st.Op.Kind == events.OpCreate {
			out = append(out, st.Op.IssuedAt)
		} else if !st.ProvisionAt.IsZero() {
			out = append(out, st.ProvisionAt)
		}
	}
	return out
}

// setLimit keeps provider's bucket in step with its catalog record: made when a limit
// appears or changes, dropped when it goes.
func (l *loop) setLimit(provider string, rec events.CatalogRecord) {
	perMinute, burst, ok := limitOf(rec)
	if c := l.limits[provider]; !ok || c == nil || c.perMinute != perMinute || c.burst != burst {
		delete(l.limits, provider)
		if ok {
			l.limits[provider] = newCreateLimit(perMinute, burst, l.recentCreates(provider), time.Now())
		}
	}
}

// countCreates takes a token for every create op of a decision.
func (l *loop) countCreates(ops []events.Op, now time.Time) {
	for _, op := range ops {
		if c := l.limits[op.Provider]; c != nil && op.Kind == events.OpCreate {
			c.took(now)
		}
	}
}
