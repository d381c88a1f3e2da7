package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// input gathers what Decide needs for one proxy from the leader's view.
func (l *loop) input(ctx context.Context, name string, result *events.OpResult) Input {
	now := time.Now() // in.Now drops its monotonic reading (UTC); the create bucket keeps it
	in := Input{Name: name, Catalog: l.catalog, Installation: l.r.cfg.Installation, Result: result,
		Now: now.UTC(), NewID: newID}
	if e, ok := l.statuses[name]; ok {
		st := e.st
		in.Status = &st
	}
	se, ok := l.specs[name]
	if !ok {
		return in
	}
	in.SpecRevision = se.rev
	if se.err != nil {
		in.SpecErr = se.err
		return in
	}
	spec := *se.spec
	in.Spec = &spec
	in.Targets = l.targets[spec.Provider]
	if c := l.limits[spec.Provider]; c != nil {
		// The bucket runs on the monotonic clock: a wall-clock step must not mint tokens.
		if w := c.wait(now); w > 0 {
			in.CreateAt = in.Now.Add(w)
		}
	}
	declared := in.Now
	if in.Status != nil {
		declared = in.Status.CreatedAt
	}
	in.Limit = l.tally.limit(l.caps, l.r.cfg.MaxInstances, spec.Provider, name, declared)
	in.Rollout = l.rolloutBudget(ctx, name, spec, in.Status)
	if in.Status != nil {
		in.Suspect = l.brakes.held(in.Status.Provider, in.Status.Host, spec.Pool)
		in.BrakeReleasedAt = l.brakes.releasedAt(in.Status.Provider, in.Status.Host, spec.Pool)
	}
	if he, ok := l.health[name]; ok {
		in.Health = &he.h
	}
	in.UserData = []byte(spec.CloudInit)
	if spec.CloudInitRef != "" {
		ud, ok := l.cloudInit[spec.CloudInitRef]
		if !ok {
			in.UserDataErr = fmt.Errorf("cloudInitRef: document %q not found in bucket %s", spec.CloudInitRef, events.BucketCloudInit)
		}
		in.UserData = ud
	}
	return in
}

// step is one proxy's way through a pass.
type step struct {
	name  string
	d     Decision
	boot  *bootSeen        // the proxy's first Ready, decided in this step
	write *kvstore.Pending // its status write in flight, if it has one
	err   error
	trace decisionTrace
}

// run decides for every proxy of the batch and carries the decisions out in three waves, each
// one round trip for the whole batch instead of one per proxy: the status writes (CAS, each
// at the revision the leader knows), then, for each proxy whose status is stored, its ops and
// events. So an op is never running without a record of it, and a leader that lost its lease
// writes nothing: its CAS fails and its ops are never sent.
func (l *loop) run(ctx context.Context, b *batch) {
	steps := make([]step, len(b.names))
	// Room made by the last batch (an instance gone, a limit raised) goes to the proxies
	// waiting for it, oldest first.
	defer func() {
		l.enqueue(l.tally.takeFreed(l.r.cfg.MaxInstances))
		l.announceFlips(ctx)
	}()
	for i, name := range b.names {
		in := l.input(ctx, name, b.results[i])
		s := &steps[i]
		s.name, s.d = name, Decide(l.r.cfg.Policy, in)
		l.countCreates(s.d.Ops, time.Now())
		l.count(name, s.d.Status) // counted as decided: the batch's next decisions see it
		s.trace = l.traceDecision(ctx, in, s.d, b.msgs[i])
		s.boot = firstReady(in, s.d.Status)
		s.write, s.err = l.startStatus(ctx, name, in.Status, s.d.Status)
	}
	var ops []pendingOp
	for i := range steps {
		s := &steps[i]
		if s.err == nil && s.write != nil {
			s.err = l.finishStatus(ctx, s)
		}
		if s.err != nil {
			l.log.Error("write status", "proxy", s.name, "err", s.err)
			l.due[s.name] = time.Now().Add(time.Second)
			if m := b.msgs[i]; m != nil {
				_ = m.NakWithDelay(time.Second)
			}
			continue
		}
		l.dropStaleHealth(ctx, s.name)
		if s.boot != nil && l.r.cfg.Boots != nil {
			l.r.cfg.Boots.ObserveBoot(s.boot.provider, s.boot.zone, s.boot.image, s.boot.took)
		}
		for _, op := range s.d.Ops {
			ops = append(ops, l.startOp(s.trace.ctx, op))
		}
		for _, ev := range s.d.Events {
			l.publishEvent(ctx, ev)
		}
		if s.d.Wake.IsZero() {
			delete(l.due, s.name)
		} else {
			l.due[s.name] = s.d.Wake
		}
	}
	for _, p := range ops {
		l.finishOp(ctx, p)
	}
	// A result is acked once its fold is stored and the ops it led to are sent (or queued
	// for the tick to send again), as before batching.
	for i, m := range b.msgs {
		if m != nil && steps[i].err == nil {
			_ = m.Ack()
		}
		steps[i].trace.end(steps[i].err != nil)
	}
}

// startStatus starts the status write of a decision: nothing when the status is unchanged,
// a synchronous delete when it goes (rare: the end of a proxy), an async CAS otherwise.
func (l *loop) startStatus(ctx context.Context, name string, old, st *events.ProxyStatus) (*kvstore.Pending, error) {
	kv := l.r.cfg.Buckets.Status
	cur, had := l.statuses[name]
	switch {
	case st == nil && !had:
		return nil, nil
	case st == nil:
		dctx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
		defer cancel()
		if err := kvstore.DeleteAt(dctx, kv, name, cur.rev); err != nil && !errors.Is(err, kvstore.ErrNotFound) {
			return nil, l.conflict(ctx, name, err)
		}
		delete(l.statuses, name)
		return nil, nil
	case had && old != nil && st.UpdatedAt.Equal(old.UpdatedAt):
		return nil, nil // unchanged
	}
	v, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode status %s: %w", name, err)
	}
	p, err := kvstore.WriteAsync(l.r.cfg.Buckets.JS, kv, name, v, cur.rev)
	if err != nil {
		return nil, l.conflict(ctx, name, err)
	}
	return p, nil
}

// dropStaleHealth removes a proxy's health record as soon as it can be about nothing the
// proxy has (DESIGN §5.1: a deleted proxy's health goes with its status): the proxy is gone
// (no status), or has no address, or the record is about another ip:port or about a
// predecessor at this one (events.ProxyHealth.About, the judgement every reader applies).
// The delete is at the revision the leader judged, so a record a prober wrote since, about
// the new instance, is never removed; a prober whose cached revision is gone re-reads and
// starts afresh. If this leader dies first, the record's TTL removes it.
func (l *loop) dropStaleHealth(ctx context.Context, name string) {
	he, ok := l.health[name]
	if !ok {
		return
	}
	if l.aboutStatus(name, &he.h) {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
	defer cancel()
	err := kvstore.DeleteAt(dctx, l.r.cfg.Buckets.Health, name, he.rev)
	switch {
	case err == nil, errors.Is(err, kvstore.ErrNotFound):
		delete(l.health, name)
		l.log.Debug("health record removed", "proxy", name, "address", he.h.Address)
	case errors.Is(err, kvstore.ErrConflict):
		// A prober wrote since; the watch brings that record, and it is judged then.
	default:
		l.log.Warn("remove health record; its TTL will", "proxy", name, "err", err)
	}
}

// finishStatus waits for a status write and records the revision it got.
func (l *loop) finishStatus(ctx context.Context, s *step) error {
	wctx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
	defer cancel()
	rev, err := s.write.Wait(wctx)
	if err != nil {
		return l.conflict(ctx, s.name, err)
	}
	l.statuses[s.name] = statusEntry{st: *s.d.Status, rev: rev}
	return nil
}

// conflict reloads a status someone else wrote (a leader that had not yet noticed it lost
// its lease), so the next attempt decides from what is really stored.
func (l *loop) conflict(ctx context.Context, name string, err error) error {
	if !errors.Is(err, kvstore.ErrConflict) {
		return err
	}
	var st events.ProxyStatus
	gctx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
	defer cancel()
	rev, gerr := kvstore.GetJSON(gctx, l.r.cfg.Buckets.Status, name, &st)
	switch {
	case errors.Is(gerr, kvstore.ErrNotFound):
		delete(l.statuses, name)
		l.count(name, nil)
	case gerr == nil:
		l.statuses[name] = statusEntry{st: st, rev: rev}
		l.count(name, &st)
	}
	return err
}

// pendingOp is an op publish in flight.
type pendingOp struct {
	op   events.Op
	f    jetstream.PubAckFuture
	err  error
	span trace.Span
}

// startOp publishes an op without waiting; its Nats-Msg-Id makes a second publish of it
// within the stream's duplicate window a no-op, so retrying one is safe. Its headers carry
// the trace context of ctx's decision.
func (l *loop) startOp(ctx context.Context, op events.Op) pendingOp {
	b, _ := json.Marshal(op)
	ctx, span := l.sendOp(ctx, op)
	m := &nats.Msg{Subject: events.OpSubject(op.Provider, op.Host, op.Proxy), Data: b, Header: nats.Header(tracing.Inject(ctx))}
	f, err := l.r.cfg.Buckets.JS.PublishMsgAsync(m, jetstream.WithMsgID(op.MsgID()))
	return pendingOp{op: op, f: f, err: err, span: span}
}

// finishOp reads an op's ack; one that failed is published again on the next tick.
func (l *loop) finishOp(ctx context.Context, p pendingOp) {
	if p.err == nil {
		actx, cancel := context.WithTimeout(ctx, kvstore.PublishAckBudget)
		_, p.err = kvstore.Await(actx, p.f)
		cancel()
	}
	defer p.span.End()
	if p.err != nil {
		p.span.SetStatus(codes.Error, "publish failed")
		l.log.Warn("publish op; will retry", "proxy", p.op.Proxy, "op", p.op.Kind, "err", p.err)
		l.unpublished[p.op.Proxy] = p.op
		return
	}
	l.log.Debug("op issued", "proxy", p.op.Proxy, "op", p.op.Kind, "opId", p.op.ID, "host", p.op.Host)
}

// publishOp publishes an op and waits for its ack: for the few the leader sends again.
func (l *loop) publishOp(ctx context.Context, op events.Op) {
	l.finishOp(ctx, l.startOp(ctx, op))
}

// eventToken keeps a proxy name usable as one subject token (invalid names can hold dots).
func eventToken(name string) string {
	if schemas.ValidName(name) == nil {
		return name
	}
	return "_invalid"
}
