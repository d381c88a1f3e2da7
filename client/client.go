package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// Client calls the lease service over a NATS connection it does not own.
type Client struct {
	nc          *nats.Conn
	timeout     time.Duration
	retryBudget time.Duration
	tracer      trace.Tracer
}

// Option configures a Client.
type Option func(*Client)

// WithRequestTimeout bounds each request to the service (default 5s), within the context's
// own deadline.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// New returns a client using nc.
func New(nc *nats.Conn, opts ...Option) *Client {
	c := &Client{nc: nc, timeout: 5 * time.Second, retryBudget: DefaultRetryBudget, tracer: tracing.Tracer(nil)}
	for _, o := range opts {
		o(c)
	}
	return c
}

// AcquireOptions is what a crawler asks for.
type AcquireOptions struct {
	Selector map[string]string // attributes the proxy must have, exactly
	Target   string            // the site to crawl: proxies cooling down for it are skipped
	TTL      time.Duration     // whole seconds; 0 takes the service's default (5m)
	Holder   string            // who holds the lease, for events and debugging
	Sticky   string            // prefer the proxy this key was last leased
	// MinAnonymity takes only proxies the probers judged at least this anonymous:
	// events.AnonymityAnonymous or events.AnonymityElite; "" takes any.
	MinAnonymity events.Anonymity
	// Strategy orders the eligible proxies: events.StrategyRoundRobin, StrategyRandom,
	// StrategyLowestLatency, StrategyBestForTarget (what worked lately on Target first,
	// exploring now and then), StrategyPacked (the busiest proxy with room first: for an
	// autoscaled pool); "" is balanced.
	Strategy events.Strategy
	// Session binds Sticky to the granted proxy for this long (whole seconds), across
	// leases and releases; 0 keeps the plain preference. StickyMode events.StickyStrict makes
	// an acquire fail (ErrNoProxy, Error.Session says why) rather than move the session.
	Session    time.Duration
	StickyMode events.StickyMode
	// Wait holds the acquire, when nothing matching is free, until a matching proxy frees a
	// slot or becomes Ready (first come, first served), for at most this long (whole seconds,
	// at most the service's leases.maxWaitSeconds, 60s by default); 0 answers at once. The
	// request's timeout grows by Wait, and the service answers before it runs out: ErrNoProxy
	// with Error.Wait when the wait was in vain. No retry loop of one's own is needed.
	Wait time.Duration
	// RequestID makes the acquire safe to send again (events.AcquireRequest.RequestID): every
	// try of one call carries it, and the service answers each with the lease of the first
	// that was granted. "" generates a random one per call, which is what a caller wants
	// unless it retries calls itself (across restarts of its own, say): then it passes the
	// same ID to each.
	RequestID string
	// Pace is the least time between two grants of one proxy for Target, whoever asks
	// (pacing; it needs Target; whole seconds, at most 1h); 0: the service's default, none
	// unless leases.paceSeconds sets one. A refusal's Availability.NextAllowedAt says when
	// the first paced proxy frees; with Wait the acquire is answered then.
	Pace time.Duration
	// Tiers are ordered selectors, cheapest first, each added to Selector: the service grants
	// on the tier Target is at, moving it up after blocked reports and back down after a
	// quiet period (it needs Target; at most events.MaxTiers). Lease.Tier says which and why.
	Tiers []map[string]string
}

func (o AcquireOptions) request() events.AcquireRequest {
	return events.AcquireRequest{Selector: o.Selector, Target: o.Target, TTLSeconds: seconds(o.TTL),
		Holder: o.Holder, Sticky: o.Sticky, MinAnonymity: o.MinAnonymity,
		Strategy: o.Strategy, SessionSeconds: seconds(o.Session), StickyMode: o.StickyMode, WaitSeconds: seconds(o.Wait),
		PaceSeconds: seconds(o.Pace), RequestID: cmp.Or(o.RequestID, newRequestID()), Tiers: o.Tiers}
}

// newRequestID is 128 random bits in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// seconds rounds a TTL up to whole seconds, so a sub-second TTL is not silently "default".
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// AcquireOnce asks for a lease and returns the grant as is: nothing renews it. For callers
// that manage renewals themselves (the CLI); crawlers want Acquire. A try that fails on the
// way (no responders, a timeout, the service's retry hint) is sent again with the same
// request ID, so a lost reply never leaves a second lease held.
func (c *Client) AcquireOnce(ctx context.Context, o AcquireOptions) (events.LeaseGrant, error) {
	var r events.LeaseReply
	req := o.request()
	_, err := c.call(ctx, events.LeaseAcquireSubject, req, &r, time.Duration(req.WaitSeconds)*time.Second)
	if o.RequestID == "" && unknownRequestID(err) {
		// A leaser of an earlier release (during a rolling upgrade) refuses the field it does
		// not know, having granted nothing: sent again without it, as that release's clients
		// sent it, the acquire is served (not idempotent then, as it was not before).
		r, req.RequestID = events.LeaseReply{}, ""
		_, err = c.call(ctx, events.LeaseAcquireSubject, req, &r, time.Duration(req.WaitSeconds)*time.Second)
	}
	return r.Lease, err
}

// unknownRequestID reports whether err is a 400 naming requestId: a service that predates it.
func unknownRequestID(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == events.CodeBadRequest && e.Field == "requestId"
}

// Renew extends lease id once; ttl 0 keeps the lease's own TTL. The ID does not change.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (events.LeaseGrant, error) {
	var r events.LeaseReply
	_, err := c.call(ctx, events.LeaseRenewSubject, events.RenewRequest{ID: id, TTLSeconds: seconds(ttl)}, &r, 0)
	return r.Lease, err
}

// Release ends lease id. It reports false, without error, if the lease had already ended or
// was someone else's.
func (c *Client) Release(ctx context.Context, id string) (bool, error) {
	r, err := c.ReleaseReply(ctx, id)
	return r.Released, err
}

// ReleaseReply ends lease id as Release does and returns the service's whole reply, whose
// Reason says why nothing was released when nothing was.
func (c *Client) ReleaseReply(ctx context.Context, id string) (events.ReleaseReply, error) {
	var r events.ReleaseReply
	_, err := c.call(ctx, events.LeaseReleaseSubject, events.ReleaseRequest{ID: id}, &r, 0)
	return r, err
}

// Result is how a leased proxy did.
type Result = events.ReportResult

// Report results.
const (
	OK      Result = events.ReportOK
	Blocked Result = events.ReportBlocked // the target blocked the proxy: cool it down for the target
	Failed  Result = events.ReportFailed  // the proxy did not work: cool it down for every target, probe it now
)

// ReportOption adjusts a report.
type ReportOption func(*events.ReportRequest)

// WithCooldown sets the cooldown (whole seconds) instead of the service's default
// (10m for Blocked, 5m for Failed).
func WithCooldown(d time.Duration) ReportOption {
	return func(r *events.ReportRequest) { r.CooldownSeconds = seconds(d) }
}

// AndRelease releases the lease with the report.
func AndRelease() ReportOption { return func(r *events.ReportRequest) { r.Release = true } }

// Report tells the service how the proxy of lease id did. target is required for Blocked.
// A report sent again after a try that may have reached the service counts once more in the
// statistics, and sets the same cooldown again; with AndRelease, a try that finds the lease
// gone after one that may have released it answers Released false, as Release does.
func (c *Client) Report(ctx context.Context, id string, result Result, target string, opts ...ReportOption) (events.ReportReply, error) {
	req := events.ReportRequest{ID: id, Result: result, Target: target}
	for _, o := range opts {
		o(&req)
	}
	var r events.ReportReply
	maybeDone, err := c.call(ctx, events.LeaseReportSubject, req, &r, 0)
	if maybeDone && req.Release && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrLost) || errors.Is(err, ErrEnded)) {
		return events.ReportReply{}, nil
	}
	return r, err
}

// Service error headers (ADR-32), as nats.go/micro sets them.
const (
	errorCodeHeader = "Nats-Service-Error-Code"
	errorHeader     = "Nats-Service-Error"
)

// callOnce sends data to subject once and decodes the reply into resp, or the service error
// into an *Error.
//
// wait is how long the service may hold the request (an acquire's waitSeconds): the timeout
// grows by it, and the request tells the service, in events.ReplyTimeoutHeader, how long this
// call listens, so that it answers in time and gives back a grant it could only make later.
func (c *Client) callOnce(ctx context.Context, subject string, data []byte, resp any, wait time.Duration) (err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+wait)
	defer cancel()
	span, h := c.startRequest(ctx, subject)
	defer func() { endRequest(span, err) }()
	if wait > 0 {
		if h == nil {
			h = map[string][]string{}
		}
		dl, _ := ctx.Deadline()
		h[events.ReplyTimeoutHeader] = []string{strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)}
	}
	m, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data, Header: nats.Header(h)})
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := m.Header.Get(errorCodeHeader); code != "" {
		var er events.ErrorReply
		if json.Unmarshal(m.Data, &er) == nil && er.Error.Code != 0 {
			d := er.Error
			return &Error{Code: d.Code, Message: d.Message, Field: d.Field, Availability: d.Availability, End: d.End,
				Reason: d.Reason, Limit: d.Limit, Session: d.Session, Wait: d.Wait, Shards: d.Shards, Retry: d.Retry}
		}
		n, _ := strconv.Atoi(code)
		return &Error{Code: events.ErrorCode(n), Message: m.Header.Get(errorHeader)}
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("%s: decode reply: %w", subject, err)
	}
	return nil
}
