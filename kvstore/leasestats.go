package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadLeaseStats hands fn every leaser's sums stored on EGRESS_LEASE_STATS from from to to
// (a zero to means now), in the order they were stored. A sum is stored at the end of its
// interval, so the window holds the intervals that ended in it. Records that do not decode
// (a newer version) are skipped.
func ReadLeaseStats(ctx context.Context, js jetstream.JetStream, from, to time.Time, fn func(events.LeaseStats)) error {
	err := readWindow(ctx, js, events.StreamLeaseStats, from, to, func(data []byte) {
		var s events.LeaseStats
		if json.Unmarshal(data, &s) == nil && s.V == 1 {
			fn(s)
		}
	})
	if err != nil {
		return fmt.Errorf("read lease statistics: %w", err)
	}
	return nil
}
