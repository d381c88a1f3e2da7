package leaser

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ActiveLeases counts the held slots of each proxy in the proxy_leases bucket kv, for
// `egressd status` and metrics. Expired and released slots are not listed by the server.
func ActiveLeases(ctx context.Context, kv jetstream.KeyValue) (map[string]int, error) {
	out := map[string]int{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		if proxy, _, ok := parseSlotKey(key); ok {
			out[proxy]++
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, nil
}
