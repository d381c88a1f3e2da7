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

// Targets reads provider_health: the latest check of every provider target, by provider,
// then in config order, then by name. A nil bucket reads as none.
func Targets(ctx context.Context, kv jetstream.KeyValue) ([]events.TargetHealth, error) {
	if kv == nil {
		return nil, nil
	}
	m, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make([]events.TargetHealth, 0, len(m))
	for _, e := range m {
		var th events.TargetHealth
		if json.Unmarshal(e.Value(), &th) == nil {
			out = append(out, th)
		}
	}
	slices.SortFunc(out, func(a, b events.TargetHealth) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), cmp.Compare(a.Order, b.Order), strings.Compare(a.Target, b.Target))
	})
	return out, nil
}
