package leaser

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// stats sums this replica's lease traffic per proxy and target and publishes the sums to
// EGRESS_LEASE_STATS at the end of every interval (docs/decisions/0058-lease-stats-sums.md):
// the durable history of a lease cycle is a counter bumped in memory, and a publish per
// interval carries thousands of cycles.
//
// Each event is counted by one replica only. A grant, renewal, release or report is counted
// by the replica that made it. An expiry, which every replica sees, is counted by the one
// that wrote the slot last (it remembers the revisions it wrote); a replica that dies takes
// the expiries of its leases uncounted with it, and an end by the service (its proxy deleted
// or replaced) is counted by the replica whose sweeper removed the slot.
type stats struct {
	js       jetstream.JetStream
	log      *slog.Logger
	member   string
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	from time.Time
	rows map[statsKey]*statsRow
	mine map[string]uint64 // slot key → the revision this replica last wrote to it
}

type statsKey struct {
	proxy, target string
	tier          int // 1-based, for leases granted in tiers; 0 without
}

type statsRow struct {
	origin
	events.LeaseCounts
}

// origin is what a row carries of its proxy besides the name, and the tier (1-based) of a
// lease granted in tiers, which keys a row of its own.
type origin struct {
	provider, pool string
	tier           int
}

// inTier is o for a lease granted on t (nil: not in tiers).
func (o origin) inTier(t *events.LeaseTier) origin {
	if t != nil {
		o.tier = t.Index + 1
	}
	return o
}

// tierMoved counts a move of target up from (a blocked report on proxy) or down to (a grant
// of proxy that probed) the tier of o.
func (s *stats) tierMoved(o origin, proxy, target string, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.row(o, proxy, target); up {
		r.TierUp++
	} else {
		r.TierDown++
	}
}

// maxStatsPart bounds one published message's JSON, under the server's default 1 MiB
// max_payload with room to spare.
const maxStatsPart = 512 << 10

func newStats(js jetstream.JetStream, log *slog.Logger, member string, interval time.Duration, now func() time.Time) *stats {
	return &stats{js: js, log: log, member: member, interval: interval, now: now, from: now(),
		rows: map[statsKey]*statsRow{}, mine: map[string]uint64{}}
}

// lease counts a lease event on proxy for target. wrote is the slot revision this replica
// just wrote (a grant or renewal), remembered so that it counts the slot's expiry.
func (s *stats) lease(o origin, proxy, target, slot string, r events.Reason, wrote uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.row(o, proxy, target).CountLease(r)
	if wrote != 0 {
		s.mine[slot] = wrote
	} else {
		delete(s.mine, slot)
	}
}

// expired counts the expiry of slot at rev if this replica wrote that revision.
func (s *stats) expired(o origin, proxy, target, slot string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.mine[slot]
	delete(s.mine, slot) // the slot is gone, whoever wrote it
	if ok && w == rev {
		s.row(o, proxy, target).Expired++
	}
}

// forget drops what this replica remembers of slot: another replica wrote it since.
func (s *stats) forget(slot string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.mine[slot]; ok && w < rev {
		delete(s.mine, slot)
	}
}

// report counts a report on proxy for target.
func (s *stats) report(o origin, proxy, target string, r events.ReportResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.row(o, proxy, target).CountReport(r)
}

// row is the row of proxy and target, created with o. Callers hold mu.
func (s *stats) row(o origin, proxy, target string) *statsRow {
	k := statsKey{proxy, target, o.tier}
	r := s.rows[k]
	if r == nil {
		r = &statsRow{origin: o}
		s.rows[k] = r
	}
	return r
}

// run publishes the sums every interval until ctx ends, then the last, partial interval
// within budget.
func (s *stats) run(ctx context.Context, budget time.Duration) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, budget)
			s.flush(pctx)
			cancel()
		case <-ctx.Done():
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
			s.flush(pctx)
			cancel()
			return
		}
	}
}

// flush publishes the interval that ends now, and starts the next. An interval with nothing
// in it publishes nothing. A publish that fails is logged and its sums lost: the statistics
// are for people, and a lease never waits on them.
func (s *stats) flush(ctx context.Context) {
	s.mu.Lock()
	rows, from, to := s.rows, s.from, s.now()
	s.rows, s.from = map[statsKey]*statsRow{}, to
	s.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	for i, part := range s.parts(rows, from, to) {
		b, err := json.Marshal(part)
		if err != nil {
			s.log.Error("encode lease statistics", "err", err)
			return
		}
		// The ID makes a publish retried by the client a duplicate the stream drops.
		id := fmt.Sprintf("stats:%s:%d:%d", s.member, from.UnixNano(), i)
		if _, err := s.js.Publish(ctx, events.LeaseStatsSubject(s.member), b, jetstream.WithMsgID(id)); err != nil {
			s.log.Warn("lease statistics lost", "from", from, "to", to, "rows", len(part.Rows), "err", err)
		}
	}
}

// parts splits rows, sorted, into messages of at most maxStatsPart bytes.
func (s *stats) parts(rows map[statsKey]*statsRow, from, to time.Time) []events.LeaseStats {
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b statsKey) int {
		return cmp.Or(cmp.Compare(a.proxy, b.proxy), cmp.Compare(a.target, b.target), cmp.Compare(a.tier, b.tier))
	})
	var out []events.LeaseStats
	cur := events.LeaseStats{V: 1, Leaser: s.member, From: from, To: to}
	const header = 256 // the record's fields besides its rows, generously
	size := header
	for _, k := range keys {
		r := rows[k]
		row := events.LeaseStatsRow{Proxy: k.proxy, Target: k.target, Provider: r.provider, Pool: r.pool, Tier: k.tier, LeaseCounts: r.LeaseCounts}
		n := rowSize(row)
		if size+n > maxStatsPart && len(cur.Rows) > 0 {
			out = append(out, cur)
			cur = events.LeaseStats{V: 1, Leaser: s.member, From: from, To: to, Part: cur.Part + 1}
			size = header
		}
		cur.Rows = append(cur.Rows, row)
		size += n
	}
	return append(out, cur)
}

// rowSize is a row's JSON length, an upper bound of what it adds to a message.
func rowSize(r events.LeaseStatsRow) int {
	b, _ := json.Marshal(r)
	return len(b) + 1
}

// newMemberID names this replica in its statistics' subject: random, since the worker name
// may hold characters a subject token cannot.
func newMemberID() string { return newToken() }
