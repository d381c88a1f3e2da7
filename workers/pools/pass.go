package pools

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// pass brings one pool one step closer to its spec: read the ledger, plan, record the ledger
// (compare-and-set: this checks the cap against every other writer), write the member specs
// it allows, then record what was written.
func (c *Controller) pass(ctx context.Context, v *view, b *blocks, pub *kvstore.Publisher, name string) error {
	s := c.cfg.Buckets
	rctx, cancel := context.WithTimeout(ctx, readBudget)
	defer cancel()
	var ledger *events.PoolStatus
	var st events.PoolStatus
	lrev, err := kvstore.GetJSON(rctx, s.PoolStatus, name, &st)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read ledger: %w", err)
	default:
		ledger = &st
	}
	now := c.cfg.Now()
	snap := v.snapshot(name, ledger)
	taken, err := c.freshMembers(rctx, v, name, ledger, snap)
	if err != nil {
		return err
	}
	in := input{Name: name, Ledger: ledger, Owned: snap.owned, Phase: snap.phases, Limited: snap.limited, Expiry: snap.expiry, Now: now,
		Stuck: snap.stuck, Boot: snap.boots, Outdated: snap.outdated,
		Taken: func(n string) bool { return taken[n] }, InUse: v.taken,
		NewSuffix: newSuffix, Load: v.loadAt, Demand: v.demandOf(name)}
	if err := readSpec(rctx, s.Pools, v, name, &in); err != nil {
		return err
	}
	if len(in.Outdated) > 0 {
		in.RolloutPaused = c.rolloutPaused(rctx, name)
	}
	names := memberNames(ledger, snap.owned)
	if in.Spec != nil {
		if err := c.countMembers(rctx, b, &in, names); err != nil {
			return err
		}
	}
	if needsEgress(in) {
		if in.Quarantine, err = c.readQuarantine(rctx); err != nil {
			return err
		}
		if in.Egress, err = c.egresses(rctx, v, names); err != nil {
			return err
		}
	}
	out := plan(in)
	if err := c.writeQuarantine(ctx, out.Quarantine); err != nil {
		return err // nothing recorded: the next pass plans again
	}

	// The ledger is written even unchanged when there are member writes: the compare-and-set
	// is what proves that no other controller moved the pool since it was read.
	if lrev, err = c.recordLedger(ctx, name, ledger, lrev, out.Ledger, len(out.Writes) > 0); err != nil {
		return err
	}
	if out.Ledger == nil {
		c.publishAll(ctx, pub, out.Events)
		return nil
	}
	// The specs first, then the events: history must not hold up the work, nor announce a
	// drain whose spec write has not been made.
	revs, deleted, evs := c.write(ctx, v, name, out.Writes)
	c.publishAll(ctx, pub, append(out.Events, evs...))
	if len(revs) == 0 && len(deleted) == 0 {
		return nil
	}
	final := withRevisions(*out.Ledger, revs, deleted)
	// If this write does not land, the next pass finds the deletes done and the specs equal
	// to what it would write, and records their revisions then; the plan never rewrites a
	// member's instance on a revision it did not record (desired keeps the instance).
	if _, err := c.recordLedger(ctx, name, out.Ledger, lrev, &final, false); err != nil && !errors.Is(err, kvstore.ErrConflict) {
		c.cfg.Log.Warn("pool ledger not updated after its member writes; the next pass does it", "pool", name, "err", err)
	}
	return nil
}

// countMembers reads the fresh counts plan needs of the members: their leases, and their
// distinct block reports within the spec's recycle window.
func (c *Controller) countMembers(ctx context.Context, b *blocks, in *input, names []string) error {
	// A pool without members holds no lease; Held with no names would list every shard's
	// keys, a watch per shard in front of a scaled-to-zero pool's first member.
	in.Leases = map[string]int{}
	if len(names) > 0 {
		var err error
		if in.Leases, err = c.cfg.Buckets.Leases.Held(ctx, names...); err != nil {
			return fmt.Errorf("count leases: %w", err)
		}
	}
	if r := in.Spec.Recycle; r != nil {
		in.Blocked = map[string]int{}
		for _, n := range names {
			in.Blocked[n] = b.distinct(n, in.Now.Add(-time.Duration(r.WindowSeconds)*time.Second))
		}
	}
	return nil
}

// freshMembers reads the ledger's members the view does not show. The view may lag: a member
// it does not show is read fresh before the plan counts it gone, so that a spec the other
// controller just wrote is never dropped from the ledger (and then doubled by a replacement).
// It adds the members still the pool's to snap and returns the names another owner took.
func (c *Controller) freshMembers(ctx context.Context, v *view, name string, ledger *events.PoolStatus, snap snapshot) (map[string]bool, error) {
	taken := map[string]bool{}
	if ledger == nil {
		return taken, nil
	}
	for _, m := range ledger.Members {
		if _, ok := snap.owned[m.Name]; ok {
			continue
		}
		e, err := c.cfg.Buckets.Proxies.Get(ctx, m.Name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("read member %s: %w", m.Name, err)
		default:
			pe := v.decodeProxy(e.Value())
			if pe.owner == name {
				snap.owned[m.Name] = owned{rev: e.Revision(), spec: pe.spec}
			} else {
				taken[m.Name] = true
			}
		}
	}
	return taken, nil
}

// withRevisions is the ledger after its member writes: each written member at the revision
// its write got, the members whose delete finished left out.
func withRevisions(l events.PoolStatus, revs map[string]uint64, deleted map[string]bool) events.PoolStatus {
	members := l.Members
	l.Members = []events.PoolMember{}
	for _, m := range members {
		if deleted[m.Name] && m.Deleting {
			continue
		}
		if r, ok := revs[m.Name]; ok {
			m.Rev = r
		}
		l.Members = append(l.Members, m)
	}
	return l
}

// readSpec reads the pool's spec fresh: the watches of pools and proxies are not ordered with
// each other, and a member seen before its pool must not read as a pool deleted. A spec that
// parses but whose members the reconciler would refuse is an error too.
func readSpec(ctx context.Context, pools jetstream.KeyValue, v *view, name string, in *input) error {
	e, err := pools.Get(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read pool: %w", err)
	}
	pe := parsePool(name, e)
	in.Spec, in.SpecErr, in.SpecRev = pe.spec, pe.err, pe.rev
	if in.Spec != nil {
		if in.SpecReason, in.SpecErr = refused(*in.Spec, v.catalogCopy()); in.SpecErr != nil {
			in.Spec = nil
		}
	}
	return nil
}

// recordLedger writes want over have (at rev) if they differ or fence says so, and returns
// the new revision. want nil deletes the record.
func (c *Controller) recordLedger(ctx context.Context, name string, have *events.PoolStatus, rev uint64, want *events.PoolStatus, fence bool) (uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, writeBudget)
	defer cancel()
	kv := c.cfg.Buckets.PoolStatus
	if want == nil {
		if have == nil {
			return 0, nil
		}
		return 0, kvstore.DeleteAt(wctx, kv, name, rev)
	}
	if have != nil && !fence && sameLedger(*have, *want) {
		return rev, nil
	}
	nrev, err := kvstore.WriteJSON(wctx, kv, name, want, rev)
	if err != nil {
		return 0, fmt.Errorf("record ledger of pool %s: %w", name, err)
	}
	c.cfg.Log.Debug("ledger recorded", "pool", name, "rev", nrev, "from", rev, "members", len(want.Members), "holder", c.cfg.Holder)
	return nrev, nil
}

// sameLedger compares two records but for when they were written.
func sameLedger(a, b events.PoolStatus) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// write makes the member writes, each within its own budget, and returns the new revisions,
// the names deleted and the events of the writes made. A write that fails (someone else wrote
// the key, NATS away) is left to the next pass.
func (c *Controller) write(ctx context.Context, v *view, pool string, ws []write) (map[string]uint64, map[string]bool, []events.Event) {
	kv := c.cfg.Buckets.Proxies
	revs, deleted := map[string]uint64{}, map[string]bool{}
	var evs []events.Event
	for _, w := range ws {
		if ctx.Err() != nil {
			break // the lease is lost: a stale leader writes no more
		}
		wctx, cancel := context.WithTimeout(ctx, writeBudget)
		var err error
		var rev uint64
		switch {
		case w.spec == nil:
			err = kv.Delete(wctx, w.name, jetstream.LastRevision(w.rev))
			if err == nil {
				v.noteDelete(w.name, w.rev)
				deleted[w.name] = true
			}
		case w.rev == 0:
			rev, err = kv.Create(wctx, w.name, w.spec)
		default:
			rev, err = kv.Update(wctx, w.name, w.spec, w.rev)
		}
		cancel()
		if err != nil {
			// A conflict is the normal race with a hand edit or another controller; anything
			// else (a denied write, NATS away) is worth a warning.
			level := slog.LevelWarn
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, kvstore.ErrConflict) {
				level = slog.LevelInfo
			}
			c.cfg.Log.Log(ctx, level, "member write not made; the next pass looks again", "pool", pool, "member", w.name, "err", err)
			continue
		}
		if w.spec != nil {
			v.notePut(w.name, w.spec, rev)
			revs[w.name] = rev
		}
		if w.reason != "" {
			evs = append(evs, events.Event{Kind: events.KindPool, Proxy: pool, At: c.cfg.Now(), Reason: w.reason, Message: w.msg,
				Pool: &events.PoolEvent{Pool: pool, Member: w.name}})
		}
	}
	return revs, deleted, evs
}

// publishAll queues pool events on pub, which checks their acks and logs a failure: events
// are history, and a stream that is slow or away must not hold up the passes.
func (c *Controller) publishAll(ctx context.Context, pub *kvstore.Publisher, evs []events.Event) {
	for _, ev := range evs {
		ev.V = 1
		ev.ID = "pool:" + randomID()
		c.cfg.Log.Info("pool", "pool", ev.Proxy, "reason", ev.Reason, "message", ev.Message)
		b, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		pub.Publish(ctx, events.EventSubject(ev.Kind, ev.Proxy), b, ev.ID, "pool", ev.Proxy, "reason", ev.Reason)
	}
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func memberNames(ledger *events.PoolStatus, own map[string]owned) []string {
	set := map[string]bool{}
	if ledger != nil {
		for _, m := range ledger.Members {
			set[m.Name] = true
		}
	}
	for n := range own {
		set[n] = true
	}
	return sortedKeys(set)
}

// rolloutPaused reads whether the pool's rollout is paused (egress_locks, rollout-pause;
// `egressd rollout pause pool <name>`). A record that cannot be read or decoded holds the
// rollout (fail closed): an outdated member keeps serving.
func (c *Controller) rolloutPaused(ctx context.Context, pool string) bool {
	var p events.RolloutPause
	_, err := kvstore.GetJSON(ctx, c.cfg.Buckets.Locks, events.RolloutPauseKey, &p)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		return false
	case err != nil:
		c.cfg.Log.Warn("read rollout pauses: the pool's rollout is held", "pool", pool, "err", err)
		return true
	}
	return p.Paused(events.PoolScope(pool))
}
