package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseKeys are the lease keys reports (events.LeaseKeysKey, in egress_locks) of the named
// providers that have one, in the order named: which lease masters each provider's lease-mode
// proxies hold, and the master rotation as its provisioner sees it (decision 88). A provider
// without one delivers no keys to running proxies.
func LeaseKeys(ctx context.Context, locks jetstream.KeyValue, providers []string) ([]events.LeaseKeysReport, error) {
	var out []events.LeaseKeysReport
	for _, p := range providers {
		var rep events.LeaseKeysReport
		_, err := kvstore.GetJSON(ctx, locks, events.LeaseKeysKey(p), &rep)
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			continue
		case err != nil:
			return out, fmt.Errorf("read the lease keys of %s: %w", p, err)
		}
		out = append(out, rep)
	}
	return out, nil
}
