package events

import "testing"

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
