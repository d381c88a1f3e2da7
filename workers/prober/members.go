package prober

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Probers divide the fleet among themselves without a coordinator: each keeps a presence
// record in egress_probers, watches the others', and probes the proxies for which it wins a
// rendezvous hash among the live probers whose filters take the proxy. Every prober computes
// the same owner from the same records; a joining or leaving prober moves only its own share.

// Presence timing: a prober renews its record every heartbeat, and a record not renewed
// within memberTTL expires on the server (no clock skew), handing that prober's proxies to the
// others. A clean stop deletes the record at once.
const (
	defaultHeartbeat = 2 * time.Second
	defaultMemberTTL = 6 * time.Second
)

// members is what a prober knows of the live probers, itself included.
type members struct {
	self   events.ProberMember
	others map[string]events.ProberMember // by member ID, from the watch
	// renewed is when the server stored each other member's last record. The server's expiry
	// of a dead prober's record is what normally removes it; but a record the server fails to
	// expire (seen after kill -9s of cluster nodes: the stream's new leader did not act on an
	// expired per-key TTL) would keep owning its share for good, leaving those proxies
	// unprobed. So a record not renewed for staleAfter is dropped here too.
	renewed map[string]time.Time
}

// staleAfter is how long past its last renewal a member record is still believed: three
// TTLs, so that a skew between this host's clock and the server's of up to two TTLs does not
// drop a live prober.
func staleAfter(memberTTL time.Duration) time.Duration { return 3 * memberTTL }

// prune drops the members whose records were last renewed before now-stale and reports
// whether any was dropped.
func (m *members) prune(now time.Time, stale time.Duration) bool {
	dropped := false
	for id, at := range m.renewed {
		if now.Sub(at) > stale {
			delete(m.others, id)
			delete(m.renewed, id)
			dropped = true
		}
	}
	return dropped
}

// apply folds a watch entry in and reports whether the set of members or their filters
// changed (a renewal that only updates the load figures changes no ownership).
func (m *members) apply(e jetstream.KeyValueEntry) bool {
	id := e.Key()
	if id == m.self.ID {
		return false // this process is a member whatever its record says
	}
	old, had := m.others[id]
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.others, id)
		delete(m.renewed, id)
		return had
	}
	var rec events.ProberMember
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.ID != id {
		delete(m.others, id) // not a member record we can reason about
		delete(m.renewed, id)
		return had
	}
	m.others[id] = rec
	if m.renewed == nil {
		m.renewed = map[string]time.Time{}
	}
	m.renewed[id] = e.Created()
	return !had || !slices.Equal(old.Filters, rec.Filters)
}

// owns reports whether this prober is the owner of proxy (on provider and host): the
// highest rendezvous score among the members whose filters take it. Ties, which need a
// 64-bit collision, go to the smaller ID so every prober still agrees.
func (m *members) owns(proxy, provider, host string) bool {
	best, bestID := hash64(m.self.ID, proxy), m.self.ID
	for id, o := range m.others {
		if !takes(o.Filters, provider, host) {
			continue
		}
		if s := hash64(id, proxy); s > best || (s == best && id < bestID) {
			best, bestID = s, id
		}
	}
	return bestID == m.self.ID
}

// takes reports whether a prober with filters probes proxies on provider and host. Filters
// are "provider" or "provider.host"; none takes everything.
func takes(filters []string, provider, host string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		p, h, hasHost := strings.Cut(f, ".")
		if p == provider && (!hasHost || h == host) {
			return true
		}
	}
	return false
}

// load is what the loop last measured, carried by each renewal so that others (and
// operators, with `nats kv get egress_probers <id>`) see how each prober keeps up.
type load struct {
	owned, backlog int
	lag            time.Duration
}

// keepPresent writes this prober's record and renews it until ctx ends, then deletes it so
// the others take its share at once. A renewal that finds the record gone (it expired while
// this process was cut off) creates it again. Failures are logged, not fatal: the others then
// probe this prober's share too, which costs probes, not correctness.
func (p *Prober) keepPresent(ctx context.Context, current func() load) error {
	kv := p.cfg.Buckets.Probers
	var rev uint64
	write := func() {
		rec := p.member
		l := current()
		rec.Owned, rec.Backlog, rec.LagSeconds = l.owned, l.backlog, l.lag.Seconds()
		b, err := json.Marshal(rec)
		if err != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, kvBudget)
		defer cancel()
		if rev != 0 {
			r, err := kvstore.PutTTL(wctx, p.cfg.Buckets.JS, kv, rec.ID, b, rev, p.cfg.MemberTTL)
			if err == nil {
				rev = r
				return
			}
			if !errors.Is(err, kvstore.ErrConflict) {
				if ctx.Err() == nil {
					p.log.Warn("prober presence not renewed", "err", err)
				}
				return
			}
		}
		r, err := kvstore.CreateTTL(wctx, kv, rec.ID, b, p.cfg.MemberTTL)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("prober presence not written", "err", err)
			}
			return
		}
		rev = r
	}
	// Present only once it can probe: the others drop its share the moment they see it.
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil
	}
	write()
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), kvBudget)
			defer cancel()
			if err := kv.Delete(dctx, p.member.ID); err != nil {
				p.log.Warn("prober presence not removed; it expires by itself", "err", err)
			}
			return nil
		case <-t.C:
			write()
		}
	}
}
