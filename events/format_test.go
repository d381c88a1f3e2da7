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
