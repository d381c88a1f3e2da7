package fleet

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Targets reads provider_health: the latest check of every provider target, by provider,
// then in config order, then by name. A nil bucket reads as none.
func Targets(ctx context.Context, kv jetstream.KeyValue) ([]events.TargetHealth, error) {
	return records(ctx, kv, func(a, b events.TargetHealth) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), cmp.Compare(a.Order, b.Order), strings.Compare(a.Target, b.Target))
	})
}

// records reads every record of kv that decodes as a T (decodeAll), in the order of compare.
func records[T any](ctx context.Context, kv jetstream.KeyValue, compare func(a, b T) int) ([]T, error) {
	if kv == nil {
		return nil, nil
	}
	m, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(m))
	for _, v := range decodeAll[T](m) {
		out = append(out, *v)
	}
	slices.SortFunc(out, compare)
	return out, nil
}
