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
// older than MinAge. A zero createdAt counts as old.
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
	if _, err := kvstore.AcquireLock(ctx, p.cfg.Store.JS, p.cfg.Store.Locks, events.GCLockKey(p.cfg.Provider, host), p.cfg.Worker, "gc", ttl); err != nil {
		if errors.Is(err, kvstore.ErrLockHeld) {
			return nil
		}
		return err
	}
	live, err := p.liveUIDs(ctx)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	list, err := p.cfg.Backend.List(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list instances: %w", err)
	}
	now := time.Now()
	deleted := 0
	for _, inst := range list {
		if !p.isOrphan(inst, host, live, now) {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
		err := p.cfg.Backend.Delete(dctx, inst.ID)
		cancel()
		if err != nil {
			p.cfg.Log.Warn("orphan GC: delete", "instance", inst.ID, "err", err)
			continue
		}
		deleted++
		p.cfg.Observer.ObserveGC(p.cfg.Provider)
		p.cfg.Log.Info("orphan GC: deleted", "instance", inst.ID, "uid", inst.Marks.UID, "createdAt", inst.Marks.CreatedAt)
		p.publishGC(ctx, events.GCDeletion{Provider: p.cfg.Provider, Host: host, ID: inst.ID, Name: inst.Name,
			UID: inst.Marks.UID, Kind: "instance", CreatedAt: inst.Marks.CreatedAt})
	}
	p.cfg.Log.Debug("orphan GC swept", "host", host, "instances", len(list), "deleted", deleted)
	return nil
}

// isOrphan: ours (this installation's mark), on this host, not a live proxy's, and old enough
// that it cannot be a create whose status the collector has not seen yet.
func (p *Provisioner) isOrphan(inst providers.Instance, host string, live map[string]bool, now time.Time) bool {
	m := inst.Marks
	switch {
	case !m.Managed || m.Installation != p.cfg.Installation:
		return false
	case inst.Host != "" && inst.Host != host:
		return false
	case live[m.UID]:
		return false
	case !m.CreatedAt.IsZero() && now.Sub(m.CreatedAt) < p.cfg.GC.MinAge:
		return false
	}
	return true
}

// liveUIDs are the UIDs in proxy_status: every proxy the reconciler has given an identity,
// including those being deleted (the reconciler deletes their instances itself).
func (p *Provisioner) liveUIDs(ctx context.Context) (map[string]bool, error) {
	w, err := p.cfg.Store.Status.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	live := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return live, nil
			}
			var st events.ProxyStatus
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				// Unreadable: treat it as live rather than risk deleting a working proxy.
				return nil, fmt.Errorf("status %s unreadable, skipping this sweep: %w", e.Key(), err)
			}
			if st.UID != "" {
				live[st.UID] = true
			}
		}
	}
}

func (p *Provisioner) publishGC(ctx context.Context, d events.GCDeletion) {
	ev := events.Event{V: 1, ID: "gc:" + d.ID + ":" + d.CreatedAt.Format(time.RFC3339Nano), Kind: events.KindGC, Proxy: d.Name,
		At: time.Now().UTC(), Reason: "OrphanDeleted", Message: fmt.Sprintf("deleted %s %s (uid %s) that no proxy owns", d.Kind, d.ID, d.UID), GC: &d}
	b, _ := json.Marshal(ev)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := p.cfg.Store.JS.Publish(pctx, events.EventSubject(events.KindGC, p.cfg.Provider), b, jetstream.WithMsgID(ev.ID)); err != nil {
		p.cfg.Log.Warn("publish gc event", "err", err)
	}
}
