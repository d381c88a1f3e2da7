package leaser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// Sticky sessions (docs/leases.md#sessions). A sticky key with sessionSeconds is bound to the
// proxy of its first grant for that long, across leases and releases, by a key
// session.<b64url(sticky)> in lease_state whose TTL is the session's lifetime. The binding is
// in KV, not in one replica's memory, so every replica sends the session to the same proxy;
// its first write is a Create, so of two acquires that start one session at once on two
// replicas one binds it and the other learns the binding. A strict session then fails rather
// than switch proxies; a soft one moves and binds the session to its new proxy for the rest
// of its lifetime.

// MaxSessionSeconds bounds a session's lifetime.
const MaxSessionSeconds = 86_400

func sessionKey(sticky string) string {
	return "session." + base64.RawURLEncoding.EncodeToString([]byte(sticky))
}

// sessionRef is a binding as the view holds it.
type sessionRef struct {
	proxy string
	until time.Time
	rev   uint64
}

// session is an acquire's sticky session.
type session struct {
	key, sticky string
	seconds     int
	strict      bool
	bound       bool // ref holds a live binding
	ref         sessionRef
}

// openSession looks the request's session up in the view, and in KV when the view has no
// binding (another replica may have bound it a moment ago, and its watch not delivered it
// yet) or the session is strict (another replica may have moved it: a strict session must
// not follow a binding that is no longer). One read more for those.
func (l *Leaser) openSession(ctx context.Context, r events.AcquireRequest) (*session, error) {
	s := &session{key: sessionKey(r.Sticky), sticky: r.Sticky, seconds: r.SessionSeconds, strict: r.StickyMode == events.StickyStrict}
	if s.ref, s.bound = l.view.session(s.key, l.now()); s.bound && !s.strict {
		return s, nil
	}
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, s.key)
	if errors.Is(err, kvstore.ErrNotFound) {
		s.ref, s.bound = sessionRef{}, false
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	l.view.noteState(s.key, rev, true, raw)
	s.ref, s.bound = l.view.session(s.key, l.now())
	return s, nil
}

// session returns the live binding of key.
func (v *view) session(key string, now time.Time) (sessionRef, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	ref, ok := v.sessions[key]
	return ref, ok && ref.until.After(now)
}

// applyState folds an entry of lease_state: holder slots, sessions and waiters (run.go
// watches no other key).
func (v *view) applyState(e jetstream.KeyValueEntry) {
	v.noteState(e.Key(), e.Revision(), isPut(e), e.Value())
}

// noteState records key as written (on, with its value) or removed as of rev, unless the view
// already has something newer.
func (v *view) noteState(key string, rev uint64, on bool, value []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev <= v.stateRev[key] {
		return
	}
	v.stateRev[key] = rev
	if !on {
		delete(v.stateRev, key) // a removed key's next write has a higher revision anyway
	}
	switch {
	case strings.HasPrefix(key, "holder."):
		v.noteHold(key, rev, on, value)
	case strings.HasPrefix(key, waitPrefix), strings.HasPrefix(key, waitingPrefix):
		v.noteWait(key, rev, on, value)
	case strings.HasPrefix(key, "session."):
		var rec events.Session
		if on && json.Unmarshal(value, &rec) == nil && rec.Proxy != "" {
			v.sessions[key] = sessionRef{proxy: rec.Proxy, until: rec.Until, rev: rev}
		} else {
			delete(v.sessions, key)
		}
	}
}

// noteStateGone removes key if the view holds it at rev: this replica just deleted it there
// (the delete marker's own revision is not returned).
func (v *view) noteStateGone(key string, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stateRev[key] != rev {
		return
	}
	delete(v.stateRev, key)
	switch {
	case strings.HasPrefix(key, "holder."):
		v.noteHold(key, rev, false, nil)
	case strings.HasPrefix(key, waitPrefix), strings.HasPrefix(key, waitingPrefix):
		v.noteWait(key, rev, false, nil)
	default:
		delete(v.sessions, key)
	}
}

// bindSession binds the session to the proxy of grant g when it is not bound to it yet: a new
// session for its lifetime, a soft one that moved for the rest of it. It returns the binding
// that holds afterwards, which names another proxy when a concurrent acquire bound the session
// first. A failed write leaves the session unbound (logged): the grant stands.
func (l *Leaser) bindSession(ctx context.Context, s *session, proxy string) sessionRef {
	if s.bound && s.ref.proxy == proxy {
		return s.ref
	}
	now := l.now()
	until := now.Add(time.Duration(s.seconds) * time.Second)
	ttl := time.Duration(s.seconds) * time.Second
	if s.bound {
		// A move keeps the lifetime; the TTL is what is left of it, in whole seconds.
		until = s.ref.until
		ttl = max(until.Sub(now).Truncate(time.Second)+time.Second, time.Second)
	}
	b, err := json.Marshal(events.Session{V: 1, Sticky: s.sticky, Proxy: proxy, BoundAt: now, Until: until})
	if err != nil {
		return sessionRef{proxy: proxy}
	}
	kv := l.cfg.Buckets.LeaseState
	var rev uint64
	if s.bound {
		rev, err = kvstore.PutTTL(ctx, l.cfg.Buckets.JS, kv, s.key, b, s.ref.rev, ttl)
	} else {
		rev, err = kvstore.CreateTTL(ctx, kv, s.key, b, ttl)
	}
	if errors.Is(err, kvstore.ErrConflict) {
		// Bound (or moved) by a concurrent acquire since the view saw it: that binding holds.
		raw, crev, gerr := l.get(ctx, kv, s.key)
		var rec events.Session
		if gerr == nil && json.Unmarshal(raw, &rec) == nil && rec.Proxy != "" {
			l.view.noteState(s.key, crev, true, raw)
			return sessionRef{proxy: rec.Proxy, until: rec.Until, rev: crev}
		}
		err = fmt.Errorf("read the binding that won: %w", cmpErr(gerr))
	}
	if err != nil {
		l.log.Warn("bind a sticky session; it stays unbound", "err", err)
		return sessionRef{proxy: proxy}
	}
	l.view.noteState(s.key, rev, true, b)
	return sessionRef{proxy: proxy, until: until, rev: rev}
}

// cmpErr is err, or a stand-in when it is nil (the record was there but unreadable).
func cmpErr(err error) error {
	if err == nil {
		return errors.New("the session record is invalid")
	}
	return err
}

// sessionError is the refusal of a strict session whose proxy cannot be leased: 503 naming
// the proxy and why.
func sessionError(s *session, cause events.SessionCause, phase events.Phase) *apiError {
	why := map[events.SessionCause]string{
		events.SessionProxyDeleted:    "it was deleted (or its spec is invalid)",
		events.SessionProxyDraining:   "it is draining",
		events.SessionProxyNotReady:   "it is not Ready",
		events.SessionProxyNotMatched: "its attributes no longer match the selector",
		events.SessionProxyBelowAnon:  "it is less anonymous than minAnonymity asks",
		events.SessionProxyCooling:    "it is cooling down",
		events.SessionProxyAtCapacity: "every one of its slots is taken",
	}[cause]
	if phase != "" {
		why = "it is " + string(phase)
	}
	return &apiError{code: events.CodeUnavailable, reason: events.ErrorSessionUnavailable,
		session: &events.SessionDetail{Proxy: s.ref.proxy, Cause: cause, Phase: phase, Until: s.ref.until},
		msg: fmt.Sprintf("sticky session %q is bound to proxy %s until %s, and %s; stickyMode strict does not move it to another proxy",
			truncate(s.sticky, 80), s.ref.proxy, s.ref.until.Format(time.RFC3339), why)}
}

// acquireStrict leases the proxy a strict session is bound to, or says why it cannot.
func (l *Leaser) acquireStrict(ctx context.Context, r events.AcquireRequest, ttl time.Duration, q selection.Query, s *session, at *attempt) (any, error) {
	c, cause, phase := l.view.fleet.SessionCandidate(q, s.ref.proxy)
	if cause != "" {
		return nil, sessionError(s, cause, phase)
	}
	if l.shards.stalled(c.Name) {
		return nil, l.shardUnavailable("the session's proxy "+c.Name+" is in a stalled lease shard", map[int]int{l.cfg.Buckets.Leases.Index(c.Name): 1}, nil)
	}
	g, _, err := l.tryCandidateTraced(ctx, r, ttl, c, at)
	switch {
	case errors.Is(err, errShardStalled):
		return nil, l.shardUnavailable("the session's proxy "+c.Name+" is in a stalled lease shard", map[int]int{l.cfg.Buckets.Leases.Index(c.Name): 1}, nil)
	case err != nil:
		return nil, err
	case g != nil:
		return g, nil
	case at.capped[c.Name]:
		return nil, holderAtCapError(r.Holder, at, nil)
	case at.CoolingGlobal[c.Name] || at.CoolingTarget[c.Name]:
		return nil, sessionError(s, events.SessionProxyCooling, "")
	}
	return nil, sessionError(s, events.SessionProxyAtCapacity, "")
}
