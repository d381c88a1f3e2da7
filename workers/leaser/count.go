package leaser

import (
	"context"
	"fmt"

	"github.com/egressd/egressd/kvstore"
)

// ActiveLeases counts the held slots of each proxy over every lease shard, for tests and
// tools. Expired and released slots are not listed by the server.
func ActiveLeases(ctx context.Context, shards kvstore.LeaseShards) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range shards.All() {
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
		}
		for key := range lister.Keys() {
			if proxy, _, ok := parseSlotKey(key); ok {
				out[proxy]++
			}
		}
		_ = lister.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}
