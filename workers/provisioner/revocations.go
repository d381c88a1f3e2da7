package provisioner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/nats-io/nats.go/jetstream"
)

// RevocationWriter is a provider that delivers lease revocation lists to its proxies (the
// local provider: a file each of its proxies re-reads). The provisioner delivers the list the
// way it delivers keys: the provider never talks to NATS.
type RevocationWriter interface {
	WriteRevocations(ctx context.Context, list *leaseauth.Revocations) error
}

// Revocations follows the installation's lease revocations (events.RevokedPrefix keys of
// lease_state, written by the leasers) and hands the whole list, pruned of entries whose tokens
// have expired, to Deliver whenever it changes.
//
// Nothing is delivered before the watch has brought every current revocation: a follower that
// starts must never overwrite what its proxies hold with a shorter list. While NATS is out of
// reach the proxies keep the last list delivered, and a revocation written meanwhile arrives
// with the watch's next delivery.
type Revocations struct {
	KV      jetstream.KeyValue // lease_state
	Proxy   string             // only this proxy's leases; "" for all
	Deliver func(ctx context.Context, list *leaseauth.Revocations) error
	Log     *slog.Logger
	// Observe, optional, is told the list's size at every delivery (metrics).
	Observe func(entries int)
	// Batch gathers revocations that arrive together into one delivery (default 100 ms);
	// Retry is the wait after a delivery that failed (default 1 s). Tests shorten them.
	Batch, Retry time.Duration
	Now          func() time.Time
}

// Follow runs Run until ctx ends, starting it again after an error (a watch NATS denied, as on
// an installation whose permissions predate revocations, or one that ended): a provisioner
// never stops provisioning for it, and its proxies keep the last list meanwhile.
func (r Revocations) Follow(ctx context.Context) error {
	for {
		err := r.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.Log.Warn("following lease revocations; proxies keep their last list; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * cmp.Or(r.Retry, time.Second)):
		}
	}
}

// Run follows until ctx ends; it returns the error that stopped it otherwise.
func (r Revocations) Run(ctx context.Context) error {
	r.Batch, r.Retry = cmp.Or(r.Batch, 100*time.Millisecond), cmp.Or(r.Retry, time.Second)
	if r.Now == nil {
		r.Now = time.Now
	}
	w, err := r.KV.Watch(ctx, events.RevokedPrefix+">")
	if err != nil {
		return fmt.Errorf("watch lease revocations: %w", err)
	}
	defer w.Stop()
	var list leaseauth.Revocations
	// batching: a change waits for the timer, which is then at most Batch away. Otherwise the
	// timer, if set, waits for the earliest entry's end, to deliver the list without it.
	ready, batching := false, false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch lease revocations: the watch ended")
			}
			if e == nil {
				ready = true
			} else if !r.apply(&list, e) {
				continue
			}
			if ready && !batching {
				batching = true
				timer.Reset(r.Batch)
			}
		case <-timer.C:
			list.Prune(r.Now())
			if err := r.Deliver(ctx, &list); err != nil {
				r.Log.Warn("deliver the lease revocation list; retrying", "err", err)
				timer.Reset(r.Retry)
				continue
			}
			batching = false
			if r.Observe != nil {
				r.Observe(list.Len())
			}
			if next, ok := list.Earliest(); ok {
				// Deliver again once the earliest entry has ended, so the list stays small.
				timer.Reset(max(next.Sub(r.Now())+time.Second, r.Batch))
			}
		}
	}
}

// apply folds one entry into list, reporting whether the list changed. A removed key (its TTL
// ran out) changes nothing: Prune drops the entry at the same time, by its own clock.
func (r Revocations) apply(list *leaseauth.Revocations, e jetstream.KeyValueEntry) bool {
	if e.Operation() != jetstream.KeyValuePut {
		return false
	}
	var rev events.LeaseRevocation
	id := strings.TrimPrefix(e.Key(), events.RevokedPrefix)
	if err := json.Unmarshal(e.Value(), &rev); err != nil || rev.Lease != id || leaseauth.ValidSubject(id) != nil {
		r.Log.Warn("a lease revocation that does not parse; skipped", "key", e.Key())
		return false
	}
	if r.Proxy != "" && rev.Proxy != r.Proxy {
		return false
	}
	list.Add(id, rev.Until)
	return true
}
