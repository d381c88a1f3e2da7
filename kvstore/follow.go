package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchEnded: a watch's channel closed while its reader still wanted it, which happens
// when the connection closes. Every role treats it the same way: it stops, and whoever owns it
// starts it again from a fresh watch (a leader steps down, a leaser restarts its view).
var ErrWatchEnded = errors.New("the watch ended (connection closed?)")

// Watch follows the keys of one bucket, the one way every role mirrors a bucket: the
// current value of every key first, then a marker that the initial values are in (Synced),
// then every change as it happens. A removed key, whether deleted, purged or expired by its
// per-key TTL (the server's marker), arrives as a Change whose Removed is true.
//
// A role selects on Updates (next to its own channels) and hands what it receives to Take,
// or, with one bucket and nothing else to wait on, calls Follow. Stop ends it (see StopWatch
// for why reading on after the SDK's Stop matters). A Watch belongs to one goroutine: Follow
// stops it on return, so its owner ends Follow by its context, not by calling Stop.
type Watch struct {
	bucket string
	w      jetstream.KeyWatcher
	synced bool
}

// WatchBucket opens a Watch of every key of kv.
func WatchBucket(ctx context.Context, kv jetstream.KeyValue) (*Watch, error) {
	return WatchKeys(ctx, kv, nil)
}

// WatchKeys opens a Watch of the keys of kv that match one of filters (every key when there
// are none), with the SDK's watch options.
func WatchKeys(ctx context.Context, kv jetstream.KeyValue, filters []string, opts ...jetstream.WatchOpt) (*Watch, error) {
	if kv == nil {
		return nil, errors.New("watch: a bucket is not open")
	}
	w, err := openWatch(ctx, kv, filters, opts...)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	return w, nil
}

// openWatch is WatchKeys without naming the bucket in its error, for a caller whose own error
// names it already (Latest: "read bucket x: …").
func openWatch(ctx context.Context, kv jetstream.KeyValue, filters []string, opts ...jetstream.WatchOpt) (*Watch, error) {
	var (
		w   jetstream.KeyWatcher
		err error
	)
	if len(filters) == 0 {
		w, err = kv.WatchAll(ctx, opts...)
	} else {
		// WatchFiltered prefixes the filters in place.
		w, err = kv.WatchFiltered(ctx, slices.Clone(filters), opts...)
	}
	if err != nil {
		return nil, err
	}
	return &Watch{bucket: kv.Bucket(), w: w}, nil
}

// Bucket is the name of the bucket the watch follows.
func (w *Watch) Bucket() string { return w.bucket }

// Updates is what to select on; every value received from it goes to Take.
func (w *Watch) Updates() <-chan jetstream.KeyValueEntry { return w.w.Updates() }

// Synced reports whether the initial values are all in.
func (w *Watch) Synced() bool { return w.synced }

// Stop ends the watch; it is safe to call more than once and on nil.
func (w *Watch) Stop() error {
	if w == nil || w.w == nil {
		return nil
	}
	err := StopWatch(w.w)
	w.w = nil
	return err
}

// Change is one thing a Watch received: an entry, or the marker that the initial values are
// in (Entry nil, Synced true).
type Change struct {
	Entry jetstream.KeyValueEntry
	// Synced: this is the marker after the initial values.
	Synced bool
	// Removed: the key is gone (deleted, purged, or expired by its TTL).
	Removed bool
}

// Take turns what Updates gave (the value and whether the channel was open) into a Change.
// A closed channel is ErrWatchEnded, naming the bucket; the caller that is stopping anyway
// (its ctx ended) takes that as the end, not as a failure.
func (w *Watch) Take(e jetstream.KeyValueEntry, ok bool) (Change, error) {
	switch {
	case !ok:
		return Change{}, fmt.Errorf("watch %s: %w", w.bucket, ErrWatchEnded)
	case e == nil:
		w.synced = true
		return Change{Synced: true}, nil
	}
	return Change{Entry: e, Removed: e.Operation() != jetstream.KeyValuePut}, nil
}

// Follow applies every entry of the watch until ctx ends, calling synced once when the
// initial values are in (nil: nobody waits for them). It stops the watch on return; it
// returns nil when ctx ended and ErrWatchEnded (wrapped) when the watch ended first.
func (w *Watch) Follow(ctx context.Context, apply func(jetstream.KeyValueEntry), synced func()) error {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			c, err := w.Take(e, ok)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil:
				return err
			case c.Synced:
				if synced != nil {
					synced()
				}
			default:
				apply(c.Entry)
			}
		}
	}
}

// SyncInitial applies the watch's initial values, up to the marker that ends them, and
// returns; the rest follows on Updates. It is for a leader that must see the whole bucket
// before it decides anything.
func (w *Watch) SyncInitial(ctx context.Context, apply func(jetstream.KeyValueEntry)) error {
	for !w.synced {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			c, err := w.Take(e, ok)
			if err != nil {
				return err
			}
			if !c.Synced {
				apply(c.Entry)
			}
		}
	}
	return nil
}
