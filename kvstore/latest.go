package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Latest returns the latest entry of every key of kv; deleted and expired keys are left out.
// A watcher delivers them all in one ordered pass and then a nil marker, which is cheaper
// than a Get per listed key.
func Latest(ctx context.Context, kv jetstream.KeyValue) (map[string]jetstream.KeyValueEntry, error) {
	if kv == nil {
		return nil, errors.New("a bucket is not open")
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]jetstream.KeyValueEntry{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read bucket %s: watcher stopped", kv.Bucket())
			}
			if e == nil {
				return out, nil
			}
			out[e.Key()] = e
		}
	}
}
