package kvstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// HeldByInstance counts proxy's lease slots by the instance each was granted on
// (events.Lease.Instance, a status's Incarnation): the reconciler deletes a retiring
// instance of a proxy rolled successor first once none is left on it (decision 98). A slot
// whose value does not read, or that records no instance (granted by an earlier release),
// counts under "": the caller cannot tell which instance it is on, and keeps every one.
func (s LeaseShards) HeldByInstance(ctx context.Context, proxy string) (map[string]int, error) {
	out := map[string]int{}
	kv := s.Of(proxy)
	w, err := WatchKeys(ctx, kv, []string{proxy + ".*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	err = w.SyncInitial(ctx, func(e jetstream.KeyValueEntry) {
		if _, _, ok := events.ParseSlotKey(e.Key()); !ok {
			return
		}
		var l events.Lease
		if json.Unmarshal(e.Value(), &l) != nil {
			out[""]++
			return
		}
		out[l.Instance]++
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	return out, nil
}
