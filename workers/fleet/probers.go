package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Probers reads egress_probers: every live prober's presence record, with the share of the
// fleet it schedules and how far behind it is, by worker then member ID. A nil bucket reads
// as none.
func Probers(ctx context.Context, kv jetstream.KeyValue) ([]events.ProberMember, error) {
	if kv == nil {
		return nil, nil
	}
	m, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make([]events.ProberMember, 0, len(m))
	for _, e := range m {
		var pm events.ProberMember
		if json.Unmarshal(e.Value(), &pm) == nil {
			out = append(out, pm)
		}
	}
	slices.SortFunc(out, func(a, b events.ProberMember) int {
		return cmp.Or(strings.Compare(a.Worker, b.Worker), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}
