package leaser

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// An interval with more rows than fit in one message is split into parts under the bound,
// numbered, each row in exactly one.
func TestStatsPartsStayUnderTheBound(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := newStats(nil, slog.New(slog.DiscardHandler), "m1", time.Minute, func() time.Time { return now })
	for _, n := range []int{0, 1, 10, 20_000} {
		rows := map[statsKey]*statsRow{}
		for i := range n {
			rows[statsKey{proxy: fmt.Sprintf("proxy-%05d", i), target: "example.com"}] = &statsRow{origin: origin{provider: "local", pool: "crawl"},
				LeaseCounts: events.LeaseCounts{Granted: i, Released: i}}
		}
		parts := s.parts(rows, now, now.Add(time.Minute))
		seen := map[string]bool{}
		for i, p := range parts {
			b, _ := json.Marshal(p)
			if len(b) > maxStatsPart {
				t.Errorf("%d rows: part %d is %d bytes", n, i, len(b))
			}
			if p.Part != i || p.Leaser != "m1" || !p.From.Equal(now) {
				t.Errorf("%d rows: part %d header %+v", n, i, p)
			}
			for _, r := range p.Rows {
				if seen[r.Proxy] {
					t.Errorf("%d rows: %s twice", n, r.Proxy)
				}
				seen[r.Proxy] = true
			}
		}
		if len(seen) != n {
			t.Errorf("%d rows: %d published", n, len(seen))
		}
		if n == 20_000 && len(parts) < 2 {
			t.Errorf("20,000 rows in %d part", len(parts))
		}
	}
}

// An expiry is counted only by the replica that wrote the slot's last revision, and only once.
func TestStatsCountAnExpiryOnTheLastWriter(t *testing.T) {
	s := newStats(nil, slog.New(slog.DiscardHandler), "m1", time.Minute, time.Now)
	o := origin{provider: "local"}
	s.lease(o, "p1", "", "p1.0", events.ReasonGranted, 5)
	s.expired(o, "p1", "", "p1.0", 4) // an older revision: someone else's lease
	s.lease(o, "p1", "", "p1.1", events.ReasonGranted, 7)
	s.forget("p1.1", 9) // another replica renewed it
	s.expired(o, "p1", "", "p1.1", 9)
	s.lease(o, "p1", "", "p1.2", events.ReasonGranted, 11)
	s.forget("p1.2", 11) // the echo of its own write
	s.expired(o, "p1", "", "p1.2", 11)
	s.expired(o, "p1", "", "p1.2", 11) // seen twice
	if got := s.rows[statsKey{proxy: "p1"}].Expired; got != 1 {
		t.Fatalf("expired %d, want 1", got)
	}
	if len(s.mine) != 0 {
		t.Fatalf("remembers %v after every slot ended", s.mine)
	}
}

// Leases granted in tiers are rows of their own per tier, with the tier moves counted where
// they happened, and the published row says the tier (1 is the first).
func TestStatsRowsPerTier(t *testing.T) {
	s := newStats(nil, slog.New(slog.DiscardHandler), "m1", time.Minute, time.Now)
	o := origin{provider: "local", pool: "dc"}
	t1, t2 := o.inTier(&events.LeaseTier{Index: 0, Of: 2}), o.inTier(&events.LeaseTier{Index: 1, Of: 2})
	s.lease(o, "p1", "a", "p1.0", events.ReasonGranted, 1)
	s.lease(t1, "p1", "a", "p1.1", events.ReasonGranted, 2)
	s.report(t1, "p1", "a", events.ReportBlocked)
	s.tierMoved(t1, "p1", "a", true)
	s.lease(t2, "p1", "a", "p1.2", events.ReasonGranted, 3)
	s.tierMoved(t1, "p1", "a", false) // a probe back down
	rows := s.parts(s.rows, time.Now(), time.Now())[0].Rows
	want := []events.LeaseStatsRow{
		{Proxy: "p1", Target: "a", Provider: "local", Pool: "dc", LeaseCounts: events.LeaseCounts{Granted: 1}},
		{Proxy: "p1", Target: "a", Provider: "local", Pool: "dc", Tier: 1, LeaseCounts: events.LeaseCounts{Granted: 1, Blocked: 1, TierUp: 1, TierDown: 1}},
		{Proxy: "p1", Target: "a", Provider: "local", Pool: "dc", Tier: 2, LeaseCounts: events.LeaseCounts{Granted: 1}},
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("rows %+v\nwant %+v", rows, want)
	}
}
