package leaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go/jetstream"
)

// rawAll publishes every lease event one by one, as before the statistics.
func rawAll(c *leaser.Config) { c.RawEvents = events.RawAll }

// Two replicas share the traffic; their sums on EGRESS_LEASE_STATS count every grant,
// renewal, release, report and expiry exactly once, with the proxy's provider and pool, while
// the raw stream, in mode reports, keeps only the reports.
func TestLeaseStatsCountEveryEventOnce(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) {
		c.RawEvents = events.RawReports
		c.StatsInterval = time.Second
	})
	r.seed(proxy{name: "p1", maxLeases: 20})
	r.startLeasers(2)

	const cycles = 12
	for i := range cycles {
		g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "a.example", TTLSeconds: 60})
		if i%3 == 0 {
			r.renew(g.ID, 30)
		}
		if i%4 == 0 {
			// another target: a.example must not cool down
			r.report(events.ReportRequest{ID: g.ID, Result: events.ReportBlocked, Target: "c.example"})
		}
		r.report(events.ReportRequest{ID: g.ID, Result: events.ReportOK, Target: "b.example"})
		r.release(g.ID)
	}
	for range 3 { // these expire
		r.mustAcquire(events.AcquireRequest{Holder: "c2", TTLSeconds: 1})
	}

	want := []fleet.StatsSum{
		{StatsKey: fleet.StatsKey{Proxy: "p1"}, LeaseCounts: events.LeaseCounts{Granted: 3, Expired: 3}},
		{StatsKey: fleet.StatsKey{Proxy: "p1", Target: "a.example"},
			LeaseCounts: events.LeaseCounts{Granted: cycles, Renewed: 4, Released: cycles}},
		{StatsKey: fleet.StatsKey{Proxy: "p1", Target: "b.example"}, LeaseCounts: events.LeaseCounts{OK: cycles}},
		{StatsKey: fleet.StatsKey{Proxy: "p1", Target: "c.example"}, LeaseCounts: events.LeaseCounts{Blocked: 3}},
	}
	ctx := context.Background()
	var got []fleet.StatsSum
	eventually(t, 15*time.Second, "the sums", func() bool {
		var err error
		got, err = fleet.SumLeaseStats(ctx, r.store.JS, time.Now().Add(-time.Hour), time.Time{}, fleet.ByProxyTarget)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Equal(got, want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("sums\n got %+v\nwant %+v", got, want)
	}
	// By provider: the rig's proxies are local, and in no pool.
	byProvider, err := fleet.SumLeaseStats(ctx, r.store.JS, time.Now().Add(-time.Hour), time.Time{}, fleet.ByProvider)
	if err != nil || len(byProvider) != 1 || byProvider[0].Provider != "local" || byProvider[0].Granted != cycles+3 {
		t.Errorf("by provider: %+v %v", byProvider, err)
	}

	// The raw stream has the reports and nothing else.
	counts, err := fleet.CountLeaseEvents(ctx, r.store.JS, time.Now().Add(-time.Hour), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		if c.Granted+c.Renewed+c.Released+c.Expired+c.Ended != 0 {
			t.Errorf("mode reports stored lease events: %+v", c)
		}
	}
}

// In the default mode a lease leaves one raw event, its end, which says when it began.
func TestDefaultRawModeKeepsOneEventPerLease(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "p1", maxLeases: 2})
	r.startLeasers(1)
	g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "a.example", TTLSeconds: 60})
	r.renew(g.ID, 30)
	r.release(g.ID)
	var got []events.Event
	eventually(t, 10*time.Second, "the release event", func() bool {
		got = readLeaseEvents(t, r.store.JS)
		return len(got) > 0
	})
	if len(got) != 1 || got[0].Reason != events.ReasonReleased || got[0].Lease.AcquiredAt.IsZero() ||
		got[0].Lease.Holder != "c1" || got[0].Lease.Target != "a.example" {
		t.Fatalf("raw events: %+v", got)
	}
}

func readLeaseEvents(t *testing.T, js jetstream.JetStream) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamLeaseEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var ev events.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}
