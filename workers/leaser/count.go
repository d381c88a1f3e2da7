package leaser

import (
	"context"

	"github.com/egressd/egressd/kvstore"
)

// ActiveLeases counts the held slots of each proxy over every lease shard, for tests and
// tools (kvstore.LeaseShards.Held, the one count of slots). Expired and released slots are
// not listed by the server.
func ActiveLeases(ctx context.Context, shards kvstore.LeaseShards) (map[string]int, error) {
	return shards.Held(ctx)
}
