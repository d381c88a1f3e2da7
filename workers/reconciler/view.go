// The leader's view of the buckets it follows: what each watched entry changes, and which
// proxies it makes the leader decide on again.

package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// loadStatuses reads every status at once (kvstore.Latest: one watch, read to the stream's
// last sequence, stopped on every return) rather than a key list and a Get per key.
func (l *loop) loadStatuses(ctx context.Context) error {
	entries, err := kvstore.Latest(ctx, l.r.cfg.Buckets.Status)
	if err != nil {
		return fmt.Errorf("read statuses: %w", err)
	}
	for k, e := range entries {
		var st events.ProxyStatus
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return fmt.Errorf("read status %s: %w", k, err)
		}
		l.statuses[k] = statusEntry{st: st, rev: e.Revision()}
		l.count(k, &st)
	}
	return nil
}

func (l *loop) names() map[string]struct{} {
	n := map[string]struct{}{}
	for k := range l.specs {
		n[k] = struct{}{}
	}
	for k := range l.statuses {
		n[k] = struct{}{}
	}
	for k := range l.health {
		n[k] = struct{}{} // a record of a proxy that is gone is decided on, and so removed
	}
	return n
}

func (l *loop) applySpec(e jetstream.KeyValueEntry) []string {
	if e == nil {
		return nil
	}
	if e.Operation() == jetstream.KeyValuePut {
		se := specEntry{raw: e.Value(), rev: e.Revision()}
		if se.err = schemas.ValidName(e.Key()); se.err != nil {
			se.err = &schemas.FieldError{Field: "name", Problem: se.err.Error()}
		} else if spec, err := schemas.ParseProxySpec(se.raw); err != nil {
			se.err = err
		} else {
			se.spec = &spec
		}
		l.specs[e.Key()] = se
	} else {
		delete(l.specs, e.Key())
	}
	return []string{e.Key()}
}

func (l *loop) applyCloudInit(e jetstream.KeyValueEntry) []string {
	if e == nil {
		return nil
	}
	if e.Operation() == jetstream.KeyValuePut {
		l.cloudInit[e.Key()] = e.Value()
	} else {
		delete(l.cloudInit, e.Key())
	}
	var affected []string
	for name, s := range l.specs {
		// A cheap pre-filter; reconcile parses the spec properly.
		if strings.Contains(string(s.raw), `"`+e.Key()+`"`) {
			affected = append(affected, name)
		}
	}
	return affected
}

func (l *loop) applyHealth(e jetstream.KeyValueEntry) []string {
	if e == nil {
		return nil
	}
	var h events.ProxyHealth
	var was *events.ProxyHealth
	if old, ok := l.health[e.Key()]; ok {
		was = &old.h
	}
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &h) != nil {
		delete(l.health, e.Key()) // expired: nobody probes it, so its health is unknown
		if was == nil {
			return nil
		}
		return []string{e.Key()}
	}
	l.health[e.Key()] = healthEntry{h: h, rev: e.Revision()}
	if sameVerdict(was, &h) && l.aboutStatus(e.Key(), &h) {
		return nil // a probe like the last one: nothing to decide again
	}
	return []string{e.Key()}
}

// aboutStatus reports whether a health record is about the proxy's instance as its stored
// status has it; one that is not is decided on, so dropStaleHealth removes it.
func (l *loop) aboutStatus(name string, h *events.ProxyHealth) bool {
	cur, ok := l.statuses[name]
	return ok && h.About(cur.st.Address(), cur.st.AddressAt)
}

func (l *loop) applyCatalog(e jetstream.KeyValueEntry) []string {
	if e == nil {
		return nil
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(l.catalog, e.Key())
	} else {
		var rec events.CatalogRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			l.log.Warn("unreadable catalog", "provider", e.Key(), "err", err)
			return nil
		}
		info := ProviderInfo{CredentialsInPlace: rec.CredentialsInPlace, MaxUnavailable: rec.Limits[events.LimitMaxUnavailable]}
		for _, h := range rec.Hosts {
			info.Hosts = append(info.Hosts, h.Name)
		}
		l.catalog[e.Key()] = info
		l.setLimit(e.Key(), rec)
		l.setCap(e.Key(), rec)
	}
	var all []string
	for n := range l.names() {
		all = append(all, n)
	}
	return all
}

// applyTarget folds a provider target's latest check (provider_health, <provider>.<target>)
// and returns the provider's proxies without an instance when the verdict changed: a failing
// target holds their creates back, and one that passes again lets them go. A check that only
// says the same again (every check interval) changes no decision, and a proxy with an
// instance is never held by one.
func (l *loop) applyTarget(e jetstream.KeyValueEntry) []string {
	if e == nil {
		return nil
	}
	provider, target, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return nil
	}
	old, had := l.targets[provider][target]
	if e.Operation() != jetstream.KeyValuePut {
		delete(l.targets[provider], target)
	} else {
		var rec events.TargetHealth
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			l.log.Warn("unreadable provider check", "key", e.Key(), "err", err)
			return nil
		}
		if l.targets[provider] == nil {
			l.targets[provider] = map[string]TargetCheck{}
		}
		c := TargetCheck{Ready: rec.Ready, Reason: rec.Reason, Message: rec.Message, CheckedAt: rec.CheckedAt}
		l.targets[provider][target] = c
		if had && c.Ready == old.Ready && c.Reason == old.Reason && c.Message == old.Message {
			return nil
		}
	}
	var affected []string
	for name, s := range l.specs {
		if s.spec != nil && s.spec.Provider == provider && l.statuses[name].st.InstanceID == "" {
			affected = append(affected, name)
		}
	}
	return affected
}
