package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
)

// rolloutTally counts, per rollout scope, the proxies that take a place in its budget
// (any stage past waiting), and how many proxies are outdated at all. The leader counts a
// decision when it makes it, so a batch cannot overrun a budget.
type rolloutTally struct {
	active   map[string]string // proxy → its scope, while it takes a place
	places   map[string]int    // scope → places taken
	outdated map[string]bool   // proxies with a rollout, in any stage
}

func newRolloutTally() *rolloutTally {
	return &rolloutTally{active: map[string]string{}, places: map[string]int{}, outdated: map[string]bool{}}
}

// set records name's status (nil: none).
func (t *rolloutTally) set(name string, st *events.ProxyStatus) {
	if scope, ok := t.active[name]; ok {
		delete(t.active, name)
		t.places[scope]--
	}
	delete(t.outdated, name)
	if st == nil || st.Rollout == nil {
		return
	}
	t.outdated[name] = true
	if st.Rollout.Counts() {
		t.active[name] = st.Rollout.Scope
		t.places[st.Rollout.Scope]++
	}
}

// others is how many proxies of scope other than name take a place.
func (t *rolloutTally) others(scope, name string) int {
	n := t.places[scope]
	if t.active[name] == scope {
		n--
	}
	return n
}

// rolloutBudget is the budget Decide sees for a proxy of its own on provider, with its
// leases counted by instance, read fresh, while it has retiring instances (decision 98).
func (l *loop) rolloutBudget(ctx context.Context, name string, spec schemas.ProxySpec, st *events.ProxyStatus) RolloutBudget {
	b := RolloutBudget{}
	if st != nil && len(st.Retiring) > 0 {
		b.Instances = l.leasesByInstance(ctx, name)
	}
	if spec.Pool != "" {
		// The pool's rotation is its budget; only the pause is shown on the member.
		b.Paused = l.paused.Paused(events.PoolScope(spec.Pool))
		return b
	}
	scope := events.ProviderScope(spec.Provider)
	b.MaxUnavailable, b.Active, b.Paused = l.catalog[spec.Provider].MaxUnavailable, l.rollouts.others(scope, name), l.paused.Paused(scope)
	if b.MaxUnavailable <= 0 {
		b.MaxUnavailable = DefaultMaxUnavailable
	}
	return b
}

// leasesByInstance counts name's leases by the instance they were granted on; nil when
// unknown (the read failed, or a lease names no instance): then no instance is deleted.
func (l *loop) leasesByInstance(ctx context.Context, name string) map[string]int {
	if l.r.cfg.Buckets.Leases.Len() == 0 {
		return map[string]int{}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held, err := l.r.cfg.Buckets.Leases.HeldByInstance(rctx, name)
	switch {
	case err != nil:
		l.log.Warn("count the leases of a proxy with retiring instances", "proxy", name, "err", err) // its instances are kept
		return nil
	case held[""] > 0:
		return nil
	}
	return held
}

// refreshPause reads the rollout pauses (egress_locks, events.RolloutPauseKey) while some
// proxy is outdated; with none, nothing is read.
func (l *loop) refreshPause(ctx context.Context) {
	if len(l.rollouts.outdated) == 0 || l.r.cfg.Buckets.Locks == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var p events.RolloutPause
	b, _, err := kvstore.Get(rctx, l.r.cfg.Buckets.Locks, events.RolloutPauseKey)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
	case err != nil:
		l.log.Warn("read rollout pauses", "err", err) // the last pauses read stay in force
		return
	case json.Unmarshal(b, &p) != nil:
		// Fail closed: a record that does not read pauses every rollout rather than none.
		l.log.Warn("rollout pauses do not decode: every rollout is held", "key", events.RolloutPauseKey)
		p = events.RolloutPause{Scopes: map[string]events.PausedScope{"*": {}}}
	}
	l.paused = p
}
