package fleet

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Quarantine reads address_quarantine: every address still in quarantine at now, the one
// that ends first first (docs/pools.md#quarantine). A record whose Until has passed is left
// out: nothing honours it any more, it only waits for its TTL; so is one that does not decode.
// A nil bucket reads as none.
func Quarantine(ctx context.Context, kv jetstream.KeyValue, now time.Time) ([]events.Quarantine, error) {
	recs, err := records(ctx, kv, func(a, b events.Quarantine) int {
		return cmp.Or(a.Until.Compare(b.Until), strings.Compare(a.Address, b.Address))
	})
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, q := range recs {
		if q.Address != "" && q.Live(now) {
			out = append(out, q)
		}
	}
	return out, nil
}
