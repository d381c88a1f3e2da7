package leaser

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/micro"
)

// Acquires that wait (docs/leases.md#waiting). An acquire with waitSeconds that finds nothing
// matching free is queued (waitqueue.go) and answered as soon as it is its turn and a slot is
// free: every watch entry that could free one (a slot released or expired, a proxy Ready, a
// cooldown over, a waiter ahead gone) wakes this replica's waiters, which then look at the
// view again; nothing polls KV. At its deadline it gets the 503 it would have got at once, with
// how long it waited and its place. Its deadline comes before the caller's own timeout (the
// ReplyTimeoutHeader), and a grant made for a caller that went away meanwhile (the timeout
// passed, the HTTP connection closed) is released rather than sent to nobody.

// Wait bounds.
const (
	// DefaultMaxWait is leases.maxWaitSeconds when the config sets none.
	DefaultMaxWait = 60 * time.Second
	// MaxWaitLimit bounds leases.maxWaitSeconds. The NATS server lets a responder answer a
	// request for allow_responses' expiry only (2m by default, and in deploy/nats): a waiter
	// answered after its deadline's last try (at most RequestBudget) must stay well inside it.
	MaxWaitLimit = 100 * time.Second
	// WaitsOff as Config.MaxWait refuses every waitSeconds above 0.
	WaitsOff time.Duration = -1
)

// WaitObserver, when the Config's Observer also implements it, hears of waiting acquires
// (metrics). outcome is granted, timed_out, gone (the caller left), stopped (the replica
// stopped) or error.
type WaitObserver interface {
	ObserveWaiting(delta int)
	ObserveWait(outcome string, waited time.Duration)
}

// waiter is one acquire that waits.
type waiter struct {
	r        events.AcquireRequest
	ttl      time.Duration
	start    time.Time       // when it arrived (monotonic)
	deadline time.Time       // when it stops waiting (monotonic)
	replyBy  time.Time       // when its caller stops listening; zero when unknown
	gone     <-chan struct{} // closed when the HTTP caller hung up; nil over NATS

	sinceWall, deadlineWall time.Time // the same, on the service's clock, for the record
	key                     string    // wait.<id> once queued
	rev                     uint64
	demandDone              func() // ends its count in the demand records (demand.go)
	idem                    *idem  // its request record, with a request ID (requests.go)
}

// waiterKey marks the context of an acquire that asked to wait: its refusals are not counted
// as demand (it is counted waiting instead, or refused once if it gives up without a lease),
// and its grant answers no refusal.
type waiterKey struct{}

func forWaiter(ctx context.Context) bool { return ctx.Value(waiterKey{}) != nil }

// vanished: nobody will receive an answer to w any more.
func (w *waiter) vanished() bool {
	if !w.replyBy.IsZero() && time.Now().After(w.replyBy) {
		return true
	}
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// replyMargin is how long before its caller's timeout a waiter stops waiting: for its last
// try and the answer's way back.
func replyMargin(hint time.Duration) time.Duration { return min(time.Second, hint/4) }

// replyTimeout reads the caller's timeout from the request's headers; 0 when it sent none.
func replyTimeout(headers map[string][]string) (time.Duration, error) {
	v := headers[events.ReplyTimeoutHeader]
	if len(v) == 0 {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		return 0, badRequest(events.ReplyTimeoutHeader, "header %s must be the caller's timeout in milliseconds (1 to 3600000), got %q",
			events.ReplyTimeoutHeader, truncate(v[0], 20))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// newWaiter sets up r's wait, from start, within the caller's timeout.
func (l *Leaser) newWaiter(r events.AcquireRequest, ttl time.Duration, start time.Time, headers map[string][]string, gone <-chan struct{}) (*waiter, error) {
	hint, err := replyTimeout(headers)
	if err != nil {
		return nil, err
	}
	wait := time.Duration(r.WaitSeconds) * time.Second
	w := &waiter{r: r, ttl: ttl, start: start, gone: gone}
	if hint > 0 {
		w.replyBy = start.Add(hint)
		wait = min(wait, hint-replyMargin(hint))
	}
	w.deadline = start.Add(max(wait, 0))
	w.sinceWall = l.now()
	w.deadlineWall = w.sinceWall.Add(time.Until(w.deadline))
	return w, nil
}

// waitable: err is a refusal that a slot freed later may turn into a grant. A stalled shard
// is not: nothing wakes a waiter when it has a leader again, so the caller is told at once
// and retries (with its request ID it keeps its place in the queue).
func waitable(err error) bool {
	ae, ok := errors.AsType[*apiError](err)
	if !ok || ae.code != events.CodeUnavailable || ae.reason == events.ErrorShardUnavailable {
		return false
	}
	if ae.session == nil {
		return true
	}
	switch ae.session.Cause {
	case events.SessionProxyAtCapacity, events.SessionProxyCooling, events.SessionProxyNotReady:
		return true
	}
	return false
}

// acquireOrQueue answers an acquire at once, or queues it when it asks to wait and nothing
// matching is free: then it returns the waiter, and the caller runs await. An acquire whose
// turn has not come (an older waiter's selector overlaps its own) is queued without a try, so
// a newcomer never takes the slot a waiter waits for.
func (l *Leaser) acquireOrQueue(ctx context.Context, data []byte, headers map[string][]string, gone <-chan struct{}) (any, *waiter, error) {
	start := time.Now()
	r, ttl, err := l.decodeAcquire(data)
	if err != nil {
		return nil, nil, err
	}
	if r.RequestID != "" {
		unlock, err := l.tries.lock(ctx, requestKey(r.Holder, r.RequestID))
		if err != nil {
			return nil, nil, err
		}
		defer unlock()
	}
	if r.WaitSeconds == 0 && r.RequestID != "" && !l.view.knowsRequest(r.Holder, r.RequestID) {
		g, err := l.grantFirstTry(ctx, r, ttl)
		return g, nil, err
	}
	prior, ri, err := l.priorGrant(ctx, r)
	if err != nil || prior != nil {
		return orNil(prior), nil, err
	}
	if r.WaitSeconds == 0 {
		g, err := l.grantOnce(ctx, r, ttl, ri)
		return g, nil, err
	}
	w, err := l.newWaiter(r, ttl, start, headers, gone)
	if err != nil {
		return nil, nil, err
	}
	w.idem = ri
	ctx = context.WithValue(ctx, waiterKey{}, true)
	if l.view.waits.PlaceOf("", r.Selector, l.now()).Ahead == 0 {
		g, err := l.grantOnce(ctx, r, ttl, ri)
		if !waitable(err) || !time.Now().Before(w.deadline) {
			if waitable(err) {
				l.demand.refused(r.Selector, r.Holder) // no time left to wait: a refusal
			}
			return g, nil, err
		}
	}
	l.wake.waiting.Add(1)
	l.waitObserver().ObserveWaiting(1)
	if err := l.enqueue(ctx, w); err != nil {
		l.wake.waiting.Add(-1)
		l.waitObserver().ObserveWaiting(-1)
		return nil, nil, err
	}
	w.demandDone = l.Waiting(r.Selector)
	return nil, w, nil
}

// acquire answers an acquire, waiting in this call if it asks to.
func (l *Leaser) acquire(ctx context.Context, data []byte) (any, error) {
	g, _, err := l.acquireWith(ctx, data, nil, nil)
	return g, err
}

// acquireWith answers an acquire, waiting in this call if it asks to (the HTTP face's way),
// and says how long it waited.
func (l *Leaser) acquireWith(ctx context.Context, data []byte, headers map[string][]string, gone <-chan struct{}) (any, time.Duration, error) {
	g, w, err := l.acquireOrQueue(ctx, data, headers, gone)
	if w == nil {
		return g, 0, err
	}
	queued := time.Now()
	g, err = l.await(ctx, w)
	return g, time.Since(queued), err
}

// acquireHandler serves acquire over NATS. A waiting acquire is answered from a goroutine of
// its own (owned by Run through l.waiters), so the endpoint's subscription goes on to the
// next request.
func (l *Leaser) acquireHandler(ctx context.Context) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		l.inflight.Add(1)
		rctx, end := l.startCall(ctx, "acquire", req.Headers())
		reply, w, err := l.acquireOrQueue(rctx, req.Data(), req.Headers(), nil)
		if w == nil {
			l.answer(req, "acquire", reply, err)
			end(err, 0)
			l.inflight.Add(-1)
			return
		}
		queued := time.Now()
		l.waiters.Go(func() {
			defer l.inflight.Add(-1)
			reply, err := l.await(rctx, w)
			l.answer(req, "acquire", reply, err)
			end(err, time.Since(queued))
		})
	})
}

// answer replies to req with reply or err.
func (l *Leaser) answer(req micro.Request, name string, reply any, err error) {
	if err != nil {
		l.replyError(req, name, err)
		return
	}
	if err := req.RespondJSON(reply); err != nil {
		l.log.Warn("reply", "endpoint", name, "err", err)
	}
}

// await holds w until its turn comes with a free slot, its deadline, its caller leaving or
// the replica stopping. Each try has a budget of its own; ctx only carries the request's span.
func (l *Leaser) await(ctx context.Context, w *waiter) (reply any, err error) {
	outcome := "error"
	defer func() {
		w.demandDone()
		if outcome == "timed_out" {
			l.demand.refused(w.r.Selector, w.r.Holder) // it waited in vain: demand unmet
		}
		l.dequeue(w)
		l.wake.waiting.Add(-1)
		l.waitObserver().ObserveWaiting(-1)
		l.waitObserver().ObserveWait(outcome, time.Since(w.start))
	}()
	base := context.WithValue(context.WithoutCancel(ctx), waiterKey{}, true)
	timer := time.NewTimer(time.Until(w.deadline))
	defer timer.Stop()
	for {
		wake := l.wake.next() // before looking: a change after the look still wakes us
		if w.vanished() {
			outcome = "gone"
			return nil, errCallerGone
		}
		g, done, err := l.waitTurn(base, w)
		if done {
			switch {
			case err == nil:
				outcome = "granted"
			case errors.Is(err, errSuperseded):
				outcome = "gone"
			}
			if err == nil && w.vanished() {
				outcome = "gone"
				l.giveBackGrant(base, g)
				return nil, errCallerGone
			}
			return g, err
		}
		select {
		case <-wake:
		case <-timer.C:
			outcome = "timed_out"
			return nil, l.waitError(w, events.WaitTimedOut)
		case <-w.gone:
		case <-l.quit:
			outcome = "stopped"
			return nil, l.waitError(w, events.WaitStopped)
		}
	}
}

// waitTurn tries w once if it is its turn: done with a grant or an error that waiting cannot
// mend. A waiter whose record was removed (its replica's heartbeat lapsed and another replica
// collected it) queues again, at the end.
func (l *Leaser) waitTurn(base context.Context, w *waiter) (any, bool, error) {
	ctx, cancel := context.WithTimeout(base, l.cfg.RequestBudget)
	defer cancel()
	if l.superseded(w) {
		return nil, true, errSuperseded
	}
	if _, ok := l.view.waits.Waiter(w.key); !ok {
		w.rev = 0
		if err := l.enqueue(ctx, w); err != nil {
			return nil, true, err
		}
	}
	if l.view.waits.PlaceOf(w.key, w.r.Selector, l.now()).Ahead > 0 {
		return nil, false, nil
	}
	g, err := l.grantOnce(ctx, w.r, w.ttl, w.idem)
	if err != nil && waitable(err) {
		return nil, false, nil
	}
	return g, true, err
}

// giveBackGrant releases a grant made for a caller that went away meanwhile.
func (l *Leaser) giveBackGrant(base context.Context, g any) {
	lr, ok := g.(events.LeaseReply)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(base, l.cfg.RequestBudget)
	defer cancel()
	id, err := parseLeaseID(lr.Lease.ID)
	if err == nil {
		_, _, err = l.deleteLease(ctx, id)
	}
	if err != nil {
		l.log.Warn("give back the lease of a waiter whose caller left; it ends at its TTL", "id", lr.Lease.ID, "err", err)
	}
}

// errCallerGone ends a wait whose caller left: nobody reads the answer.
var errCallerGone = &apiError{code: events.CodeUnavailable, msg: "the caller stopped waiting for the answer"}

// errSuperseded ends a wait that a retry of the same acquire (its request ID) took over:
// the retry waits on in its place, and the caller of this try has gone.
var errSuperseded = &apiError{code: events.CodeUnavailable, msg: "a retry of this acquire (the same requestId) took its place in the queue"}

// waitError is the 503 of a waiter that stops without a lease: the numbers of a refusal, plus
// how long it waited and its place in the queue.
func (l *Leaser) waitError(w *waiter, cause events.WaitCause) error {
	av := l.view.fleet.Availability(selection.NewQuery(w.r), selection.NewLearned())
	place := l.view.waits.PlaceOf(w.key, w.r.Selector, l.now())
	waited := time.Since(w.start)
	until := w.deadlineWall
	detail := &events.WaitDetail{WaitedSeconds: waited.Round(time.Millisecond).Seconds(), Position: place.Ahead + 1,
		Waiting: place.Waiting, Cause: cause, Until: &until}
	msg := fmt.Sprintf("no proxy available after waiting %.1fs (place %d of %d waiting): %d match the selector, %d of them Ready, %d at capacity, %d cooling down for this target, %d cooling down for every target",
		waited.Seconds(), detail.Position, detail.Waiting, av.Matched, av.Ready, av.AtCapacity, av.CoolingTarget, av.CoolingGlobal)
	if cause == events.WaitStopped {
		msg = fmt.Sprintf("the leaser replica holding this acquire stopped after it waited %.1fs; try again", waited.Seconds())
	}
	return &apiError{code: events.CodeUnavailable, msg: msg, avail: &av, wait: detail, retry: cause == events.WaitStopped}
}

// waitObserver is the Observer's WaitObserver, or one that does nothing.
func (l *Leaser) waitObserver() WaitObserver {
	if o, ok := l.cfg.Observer.(WaitObserver); ok {
		return o
	}
	return noWaitObserver{}
}

type noWaitObserver struct{}

func (noWaitObserver) ObserveWaiting(int)                {}
func (noWaitObserver) ObserveWait(string, time.Duration) {}
