package events

import (
	"testing"
	"time"
)

func TestSummaryOfPoolEvents(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonDrainStarted, Message: "reached its maximum age",
			Pool: &PoolEvent{Pool: "crawl", Member: "crawl-a1b2c", Successor: "crawl-d3e4f", Leases: 2}},
			"crawl-a1b2c DrainStarted (successor crawl-d3e4f), 2 leases held — reached its maximum age"},
		// The controller's messages name the member (workers/pools): not said twice.
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonDrainStarted,
			Message: "member crawl-a1b2c is draining (MaxAge): successor crawl-d3e4f is Ready",
			Pool:    &PoolEvent{Pool: "crawl", Member: "crawl-a1b2c", Successor: "crawl-d3e4f", Leases: 2}},
			"DrainStarted, 2 leases held — member crawl-a1b2c is draining (MaxAge): successor crawl-d3e4f is Ready"},
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonDrainTimeout,
			Message: "member crawl-a1b2c still holds 3 leases after the drain timeout (900s): deleting it",
			Pool:    &PoolEvent{Pool: "crawl", Member: "crawl-a1b2c", Leases: 3}},
			"DrainTimeout — member crawl-a1b2c still holds 3 leases after the drain timeout (900s): deleting it"},
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonDrainStarted, Message: "member crawl-a1b2c is draining (MaxAge)",
			Pool: &PoolEvent{Pool: "crawl", Member: "crawl-a1b2c", Leases: 1}},
			"DrainStarted, 1 lease held — member crawl-a1b2c is draining (MaxAge)"},
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonMemberCreated, Pool: &PoolEvent{Pool: "crawl", Member: "crawl-x1y2z"}},
			"crawl-x1y2z MemberCreated"},
		{Event{Kind: KindPool, Proxy: "crawl", Reason: ReasonRotationHeld, Message: "minAvailable 2 leaves no room",
			Pool: &PoolEvent{Pool: "crawl"}},
			"RotationHeld — minAvailable 2 leaves no room"},
	} {
		if got := c.ev.Summary(); got != c.want {
			t.Errorf("summary %q, want %q", got, c.want)
		}
	}
}

// A gc event says why the collector deleted: an orphan, or an instance past its lifetime.
func TestSummaryOfGCEvents(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	gc := &GCDeletion{ID: "local/egress-y", UID: "u8", Kind: GCInstance, CreatedAt: at.Add(-20 * time.Second), ExpiresAt: at}
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{Event{Kind: KindGC, Reason: ReasonOrphanDeleted, GC: gc}, "deleted orphan local/egress-y (uid u8)"},
		{Event{Kind: KindGC, Reason: ReasonLifetimeExceeded, GC: gc},
			"LifetimeExceeded: deleted local/egress-y (uid u8), its lifetime ended at 2026-11-30T12:00:00Z"},
	} {
		if got := c.ev.Summary(); got != c.want {
			t.Errorf("summary %q, want %q", got, c.want)
		}
	}
}
