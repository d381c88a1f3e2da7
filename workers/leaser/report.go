package leaser

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// report records how a leased proxy did. blocked cools the proxy down for the target, failed
// for every target and asks a prober to check it now; ok changes nothing but the event
// stream. Only the holder of a live lease can report, so nobody can cool down a proxy they
// do not hold. A later cooldown of the same key replaces the earlier one.
func (l *Leaser) report(ctx context.Context, data []byte) (any, error) {
	r, id, cooldown, err := l.decodeReport(data)
	if err != nil {
		return nil, err
	}
	rec, _, err := l.readLease(ctx, id)
	if err != nil {
		return nil, err
	}
	now := l.now()
	var reply events.ReportReply
	if r.Result != events.ReportOK {
		key := globalCooldownKey(id.Proxy)
		if r.Result == events.ReportBlocked {
			key = targetCooldownKey(id.Proxy, r.Target)
		}
		cd := events.Cooldown{V: 1, Proxy: id.Proxy, Result: r.Result, Holder: rec.Holder}
		if r.Result == events.ReportBlocked {
			cd.Target = r.Target
			if cooldown, cd.Strikes, err = l.escalate(ctx, id.Proxy, r.Target, cooldown, now); err != nil {
				return nil, err
			}
		}
		cd.Until = now.Add(cooldown)
		b, err := json.Marshal(cd)
		if err != nil {
			return nil, err
		}
		rev, err := kvstore.PutTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.Cooldowns, key, b, 0, cooldown)
		if err != nil {
			return nil, fmt.Errorf("write cooldown %s: %w", key, err)
		}
		l.view.noteCooldown(key, rev, true, cd.Until)
		reply.CooldownUntil, reply.Strikes = cd.Until, cd.Strikes
		if r.Result == events.ReportBlocked {
			if reply.NeighboursCooled, err = l.coolNeighbours(ctx, id.Proxy, r.Target, rec.Holder, cooldown); err != nil {
				l.log.Warn("cool the blocked proxy's neighbours", "proxy", id.Proxy, "err", err)
			}
		}
	}
	if r.Result == events.ReportFailed {
		l.probeNow(id.Proxy, now)
	}
	if r.Result == events.ReportOK && r.Target != "" && l.cfg.Escalation.on() {
		if err := l.forgive(ctx, id.Proxy, r.Target, now); err != nil {
			l.log.Warn("take a strike off after a success; it fades at the strike memory", "proxy", id.Proxy, "err", err)
		}
	}
	o := l.view.originOf(id.Proxy).inTier(rec.Tier)
	if r.Result == events.ReportBlocked && rec.Tier != nil && r.Target == rec.Target {
		tier, moved, err := l.tierBlocked(ctx, *rec.Tier, r.Target, now)
		if err != nil {
			return nil, err
		}
		reply.Tier, reply.TierMoved = tier+1, moved
		if moved {
			l.stats.tierMoved(o, id.Proxy, r.Target, true)
		}
	}
	l.learn(id.Proxy, r.Target, r.Result, now)
	l.stats.report(o, id.Proxy, r.Target, r.Result)
	l.emitter.emitUnique(events.Event{ID: "report:" + id.String() + ":" + newToken(), Kind: events.KindReport, Proxy: id.Proxy,
		At: now, Reason: events.Reason(r.Result), Lease: &events.LeaseEvent{ID: id.String(), Holder: rec.Holder, Target: r.Target,
			Result: r.Result, Until: reply.CooldownUntil}})
	l.log.Info("report", "id", id.String(), "result", r.Result, "target", r.Target, "cooldown", cooldown)
	if r.Release {
		released, _, err := l.deleteLease(ctx, id)
		if err != nil {
			return nil, l.stalledRelease(id, err)
		}
		reply.Released = released
	}
	return reply, nil
}

// learn tells best-for-target what a report says of proxy on target: ok and blocked are
// about the site; failed is about the proxy, and cools it for every target instead.
func (l *Leaser) learn(proxy, target string, r events.ReportResult, now time.Time) {
	switch r {
	case events.ReportOK:
		l.view.fleet.Outcome(proxy, target, 0, 1, 0, now)
	case events.ReportBlocked:
		l.view.fleet.Outcome(proxy, target, 0, 0, 1, now)
	}
}

// probeNow asks the probers to check proxy at once (core NATS, like the reconciler's
// interval probes). It is best effort: the interval probe follows anyway.
func (l *Leaser) probeNow(proxy string, now time.Time) {
	t, known, _ := l.view.fleet.Endpoint(proxy, 0)
	if !known || t.Provider == "" || t.Host == "" || t.IP == "" {
		l.log.Warn("no probe requested: the proxy's provider, host or address is unknown", "proxy", proxy)
		return
	}
	b, err := json.Marshal(events.ProbeRequest{V: 1, Proxy: proxy, Provider: t.Provider, Host: t.Host,
		Address: t.IP, Port: t.Port, Reason: events.ReasonReport, At: now})
	if err == nil {
		err = l.cfg.NC.Publish(events.ProbeSubject(t.Provider, t.Host, proxy), b)
	}
	if err != nil {
		l.log.Warn("request probe", "proxy", proxy, "err", err)
	}
}
