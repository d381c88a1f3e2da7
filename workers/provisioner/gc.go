package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/nats-io/nats.go/jetstream"
)

// GC settings (DESIGN §5.2): every Interval, the one provisioner holding a host's GC lock
// deletes the instances carrying this installation's mark whose UID is not live and that are
// older than MinAge (a zero createdAt counts as old), and those whose own mark says their
// lifetime has ended, live or not (decision 0076).
type GC struct {
	Interval time.Duration // 0 disables GC
	MinAge   time.Duration
}

// DefaultGC is the production setting.
func DefaultGC() GC { return GC{Interval: 10 * time.Minute, MinAge: 10 * time.Minute} }

// gcLoop sweeps until ctx ends.
func (p *Provisioner) gcLoop(ctx context.Context) {
	if p.cfg.GC.Interval <= 0 {
		return
	}
	// A first sweep soon after start, then one per interval.
	t := time.NewTimer(min(p.cfg.GC.Interval, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("orphan GC", "err", err)
		}
		t.Reset(p.cfg.GC.Interval)
	}
}

// Sweep runs one GC round over the hosts this provisioner serves, skipping hosts another
// provisioner swept this round.
func (p *Provisioner) Sweep(ctx context.Context) error {
	var errs []error
	for _, host := range p.cfg.Hosts {
		if err := p.sweepHost(ctx, host); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
		}
	}
	return errors.Join(errs...)
}

// sweepHost collects the host's orphans if no other provisioner did this round. The lock is
// left to expire rather than released, so the round's holder is the only sweeper of that
// interval however many provisioners serve the host.
func (p *Provisioner) sweepHost(ctx context.Context, host string) error {
	ttl := max(p.cfg.GC.Interval*9/10, time.Second) // the server refuses TTLs under 1 s
	if _, err := kvstore.AcquireLock(ctx, p.cfg.Buckets.JS, p.cfg.Buckets.Locks, events.GCLockKey(p.cfg.Provider, host), p.cfg.Worker, "gc", ttl); err != nil {
		if errors.Is(err, kvstore.ErrLockHeld) {
			return nil
		}
		return err
	}
	// Without the live identities no orphan is collected (it might be a working proxy's), but
	// an instance whose own mark says it has passed its lifetime still is: that needs no one.
	live, liveNames, liveErr := p.liveIdentities(ctx)
	lctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	list, err := p.cfg.Backend.List(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list instances: %w", err)
	}
	now := time.Now()
	deleted := 0
	for _, inst := range list {
		why := p.collectable(inst, host, live, liveErr == nil, now)
		if why == "" {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
		err := p.cfg.Backend.Delete(dctx, inst.ID)
		cancel()
		if err != nil {
			p.cfg.Log.Warn("orphan GC: delete", "instance", inst.ID, "reason", why, "err", err)
			continue
		}
		deleted++
		p.cfg.Observer.ObserveGC(p.cfg.Provider)
		p.cfg.Log.Info("orphan GC: deleted", "instance", inst.ID, "uid", inst.Marks.UID, "reason", why,
			"createdAt", inst.Marks.CreatedAt, "expiresAt", inst.Marks.ExpiresAt)
		p.publishGC(ctx, why, events.GCDeletion{Provider: p.cfg.Provider, Host: host, ID: inst.ID, Name: inst.Name,
			UID: inst.Marks.UID, Kind: events.GCInstance, CreatedAt: inst.Marks.CreatedAt, ExpiresAt: inst.Marks.ExpiresAt})
	}
	p.cfg.Log.Debug("orphan GC swept", "host", host, "instances", len(list), "deleted", deleted)
	if liveErr != nil {
		return liveErr
	}
	p.sweepLeftovers(ctx, host, liveNames, now)
	return nil
}

// sweepLeftovers deletes leftovers on host whose instance name no proxy holds and that were
// not touched for MinAge: a create or delete in progress touches its volumes.
func (p *Provisioner) sweepLeftovers(ctx context.Context, host string, liveNames map[string]bool, now time.Time) {
	if p.cfg.Leftovers == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	list, err := p.cfg.Leftovers.Leftovers(lctx)
	cancel()
	if err != nil {
		p.cfg.Log.Warn("orphan GC: list leftovers", "host", host, "err", err)
		return
	}
	for _, lo := range list {
		if lo.Host != host || liveNames[lo.Name] || !lo.ModifiedAt.IsZero() && now.Sub(lo.ModifiedAt) < p.cfg.GC.MinAge {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
		err := p.cfg.Backend.Delete(dctx, lo.ID)
		cancel()
		if err != nil {
			p.cfg.Log.Warn("orphan GC: delete leftover", "id", lo.ID, "err", err)
			continue
		}
		p.cfg.Observer.ObserveGC(p.cfg.Provider)
		p.cfg.Log.Info("orphan GC: deleted leftover", "id", lo.ID, "parts", lo.Parts)
		p.publishGC(ctx, events.ReasonOrphanDeleted, events.GCDeletion{Provider: p.cfg.Provider, Host: host, ID: lo.ID, Name: lo.Name, Kind: events.GCLeftover, CreatedAt: lo.ModifiedAt})
	}
}

// collectable says why the collector deletes inst, "" if it does not: its lifetime has passed
// (LifetimeExceeded, a live proxy's instance too: the mark is the instance's own word, so it
// dies on time whether a reconciler runs or not), or nobody owns it (OrphanDeleted).
func (p *Provisioner) collectable(inst providers.Instance, host string, live map[string]bool, liveKnown bool, now time.Time) events.Reason {
	switch {
	case !p.ours(inst, host):
		return ""
	case inst.Marks.Expired(now):
		return events.ReasonLifetimeExceeded
	case liveKnown && p.isOrphan(inst, live, now):
		return events.ReasonOrphanDeleted
	}
	return ""
}

// ours: this installation's mark, on this host.
func (p *Provisioner) ours(inst providers.Instance, host string) bool {
	m := inst.Marks
	return m.Managed && m.Installation == p.cfg.Installation && (inst.Host == "" || inst.Host == host)
}

// isOrphan: (ours, which collectable checked) not a live proxy's, and old enough that it
// cannot be a create whose status the collector has not seen yet.
func (p *Provisioner) isOrphan(inst providers.Instance, live map[string]bool, now time.Time) bool {
	m := inst.Marks
	switch {
	case live[m.UID]:
		return false
	case !m.CreatedAt.IsZero() && now.Sub(m.CreatedAt) < p.cfg.GC.MinAge:
		return false
	}
	return true
}

// liveIdentities are the UIDs and instance names in proxy_status: every proxy the reconciler
// has given an identity, including those being deleted (it deletes their instances itself).
func (p *Provisioner) liveIdentities(ctx context.Context) (uids, names map[string]bool, err error) {
	entries, err := kvstore.Latest(ctx, p.cfg.Buckets.Status)
	if err != nil {
		return nil, nil, err
	}
	uids, names = map[string]bool{}, map[string]bool{}
	for key, e := range entries {
		var st events.ProxyStatus
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			// Unreadable: skip the sweep rather than risk deleting a working proxy.
			return nil, nil, fmt.Errorf("status %s unreadable, skipping this sweep: %w", key, err)
		}
		if st.UID != "" {
			uids[st.UID] = true
		}
		if st.InstanceName != "" {
			names[st.InstanceName] = true
		}
		// A successor and retiring instances carry the proxy's UID, so they are no orphans;
		// their names keep their leftovers from the sweep while their creates and deletes run.
		for _, n := range st.InstanceNames() {
			names[n] = true
		}
	}
	return uids, names, nil
}

func (p *Provisioner) publishGC(ctx context.Context, why events.Reason, d events.GCDeletion) {
	msg := fmt.Sprintf("deleted %s %s (uid %s) that no proxy owns", d.Kind, d.ID, d.UID)
	if why == events.ReasonLifetimeExceeded {
		msg = fmt.Sprintf("deleted %s %s (uid %s): its lifetime (%s from its creation at %s) ended at %s", d.Kind, d.ID, d.UID,
			d.ExpiresAt.Sub(d.CreatedAt), d.CreatedAt.UTC().Format(time.RFC3339), d.ExpiresAt.UTC().Format(time.RFC3339))
	}
	ev := events.Event{V: 1, ID: "gc:" + d.ID + ":" + d.CreatedAt.Format(time.RFC3339Nano), Kind: events.KindGC, Proxy: d.Name,
		At: time.Now().UTC(), Reason: why, Message: msg, GC: &d}
	b, _ := json.Marshal(ev)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := p.cfg.Buckets.JS.Publish(pctx, events.EventSubject(events.KindGC, p.cfg.Provider), b, jetstream.WithMsgID(ev.ID)); err != nil {
		p.cfg.Log.Warn("publish gc event", "err", err)
	}
}
