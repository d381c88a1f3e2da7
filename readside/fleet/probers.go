package fleet

import (
	"cmp"
	"context"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Probers reads egress_probers: every live prober's presence record, with the share of the
// fleet it schedules and how far behind it is, by worker then member ID. A nil bucket reads
// as none.
func Probers(ctx context.Context, kv jetstream.KeyValue) ([]events.ProberMember, error) {
	return records(ctx, kv, func(a, b events.ProberMember) int {
		return cmp.Or(strings.Compare(a.Worker, b.Worker), strings.Compare(a.ID, b.ID))
	})
}
