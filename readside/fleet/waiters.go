package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Waiters are the acquires waiting for a slot on every leaser replica (docs/leases.md#waiting),
// from their records wait.<id> in lease_state, in queue order (oldest first). It is read on
// demand (egressd status leases), like Leases.
type Waiters struct {
	At   time.Time   `json:"at"`
	Rows []WaiterRow `json:"waiting"`
}

// WaiterRow is one waiting acquire.
type WaiterRow struct {
	Holder   string            `json:"holder,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Target   string            `json:"target,omitempty"`
	Worker   string            `json:"worker,omitempty"` // the leaser replica holding it
	Since    time.Time         `json:"since"`
	Deadline time.Time         `json:"deadline"`
	// Expired: its deadline passed and its record is still there: the replica that held it
	// is gone, and the record expires by itself shortly.
	Expired bool `json:"expired,omitempty"`
}

// Oldest is the longest wait so far among the live rows (zero when none).
func (w *Waiters) Oldest() time.Duration {
	var d time.Duration
	for _, r := range w.Rows {
		if !r.Expired {
			d = max(d, w.At.Sub(r.Since))
		}
	}
	return d
}

// Live counts the rows whose deadline has not passed.
func (w *Waiters) Live() int {
	n := 0
	for _, r := range w.Rows {
		if !r.Expired {
			n++
		}
	}
	return n
}

// LoadWaiters reads the wait.<id> records of lease_state (and nothing else of it: holder slots
// and sessions are not a viewer's to read). A record that does not decode is left out.
func LoadWaiters(ctx context.Context, kv jetstream.KeyValue, now time.Time) (*Waiters, error) {
	w, err := kvstore.WatchKeys(ctx, kv, []string{"wait.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	type entry struct {
		rev uint64
		row WaiterRow
	}
	var got []entry
	err = w.SyncInitial(ctx, func(e jetstream.KeyValueEntry) {
		var rec events.Waiter
		if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil {
			return
		}
		got = append(got, entry{e.Revision(), WaiterRow{Holder: rec.Holder, Selector: rec.Selector, Target: rec.Target,
			Worker: rec.Worker, Since: rec.Since, Deadline: rec.Deadline, Expired: !now.Before(rec.Deadline)}})
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kv.Bucket(), err)
	}
	slices.SortFunc(got, func(a, b entry) int { return cmp.Compare(a.rev, b.rev) })
	out := &Waiters{At: now, Rows: make([]WaiterRow, 0, len(got))}
	for _, e := range got {
		out.Rows = append(out.Rows, e.row)
	}
	return out, nil
}
