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
	"github.com/nats-io/nats.go/jetstream"
)

// input gathers what Decide needs for one proxy from the leader's view.
func (l *loop) input(name string, result *events.OpResult) Input {
	in := Input{Name: name, Catalog: l.catalog, Installation: l.r.cfg.Installation, Result: result,
		Now: time.Now().UTC(), NewID: newID}
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
	if h, ok := l.health[name]; ok {
		in.Health = &h
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

// reconcile decides for one proxy and carries the decision out: the status first (so an op
// is never running without a record of it), then the ops, then the events.
func (l *loop) reconcile(ctx context.Context, name string, result *events.OpResult) error {
	in := l.input(name, result)
	d := Decide(l.r.cfg.Policy, in)
	if err := l.writeStatus(ctx, name, in.Status, d.Status); err != nil {
		l.log.Error("write status", "proxy", name, "err", err)
		l.due[name] = time.Now().Add(time.Second)
		return err
	}
	for _, op := range d.Ops {
		l.publishOp(ctx, op)
	}
	for _, ev := range d.Events {
		l.publishEvent(ctx, ev)
	}
	if d.Wake.IsZero() {
		delete(l.due, name)
	} else {
		l.due[name] = d.Wake
	}
	return nil
}

func (l *loop) writeStatus(ctx context.Context, name string, old, st *events.ProxyStatus) error {
	kv := l.r.cfg.Store.Status
	cur, had := l.statuses[name]
	switch {
	case st == nil && !had:
		return nil
	case st == nil:
		if err := kvstore.DeleteAt(ctx, kv, name, cur.rev); err != nil && !errors.Is(err, kvstore.ErrNotFound) {
			return l.conflict(ctx, name, err)
		}
		delete(l.statuses, name)
		return nil
	case had && old != nil && st.UpdatedAt.Equal(old.UpdatedAt):
		return nil // unchanged
	}
	rev, err := kvstore.WriteJSON(ctx, kv, name, st, cur.rev)
	if err != nil {
		return l.conflict(ctx, name, err)
	}
	l.statuses[name] = statusEntry{st: *st, rev: rev}
	return nil
}

// conflict reloads a status someone else wrote (a leader that had not yet noticed it lost
// its lease), so the next attempt decides from what is really stored.
func (l *loop) conflict(ctx context.Context, name string, err error) error {
	if !errors.Is(err, kvstore.ErrConflict) {
		return err
	}
	var st events.ProxyStatus
	rev, gerr := kvstore.GetJSON(ctx, l.r.cfg.Store.Status, name, &st)
	switch {
	case errors.Is(gerr, kvstore.ErrNotFound):
		delete(l.statuses, name)
	case gerr == nil:
		l.statuses[name] = statusEntry{st: st, rev: rev}
	}
	return err
}

func (l *loop) publishOp(ctx context.Context, op events.Op) {
	b, _ := json.Marshal(op)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := l.r.cfg.Store.JS.Publish(pctx, events.OpSubject(op.Provider, op.Host, op.Proxy), b, jetstream.WithMsgID(op.MsgID()))
	if err != nil {
		l.log.Warn("publish op; will retry", "proxy", op.Proxy, "op", op.Kind, "err", err)
		l.unpublished[op.Proxy] = op
		return
	}
	l.log.Debug("op issued", "proxy", op.Proxy, "op", op.Kind, "opId", op.ID, "host", op.Host)
}

func (l *loop) publishEvent(ctx context.Context, ev events.Event) {
	ev.ID = newID()
	b, _ := json.Marshal(ev)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := l.r.cfg.Store.JS.Publish(pctx, events.EventSubject(ev.Kind, eventToken(ev.Proxy)), b, jetstream.WithMsgID(ev.ID)); err != nil {
		l.log.Warn("publish event", "proxy", ev.Proxy, "kind", ev.Kind, "err", err)
	}
	if ev.Kind == events.KindPhase {
		l.log.Info("phase", "proxy", ev.Proxy, "from", ev.From, "to", ev.Phase, "reason", ev.Reason, "message", ev.Message)
	}
}

// eventToken keeps a proxy name usable as one subject token (invalid names can hold dots).
func eventToken(name string) string {
	if schemas.ValidName(name) == nil {
		return name
	}
	return "_invalid"
}
