package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stopBudget bounds how long StopWatch reads a stopped watcher's channel. Once unsubscribed,
// nats.go delivers at most the message already in its handler, so the channel closes at once
// unless the connection is wedged.
const stopBudget = 5 * time.Second

// errWatchNotClosed: a stopped watcher's channel did not close within stopBudget, so the
// nats.go goroutine that feeds it may be blocked for good.
var errWatchNotClosed = errors.New("a stopped watcher's updates did not close")

// StopWatch stops w and reads its Updates until nats.go closes them; every watcher is ended
// with it rather than with w.Stop alone.
//
// Why: nats.go's watch handler runs on the subscription's delivery goroutine and sends each
// entry on a channel of 256, blocking while it is full ("by design"). Stop unsubscribes but
// cannot interrupt a send in progress, and the channel is closed by that same goroutine only
// after the send returns. A reader that stops reading a busy bucket (it has what it wanted,
// or its context ended) and then calls Stop leaves that goroutine blocked on the full
// channel for as long as the process lives. Reading after Stop lets the send finish, the
// goroutine see the subscription closed, and close the channel.
func StopWatch(w jetstream.KeyWatcher) error {
	if w == nil {
		return nil
	}
	err := w.Stop()
	updates := w.Updates()
	if updates == nil {
		return err
	}
	t := time.NewTimer(stopBudget)
	defer t.Stop()
	for {
		select {
		case _, ok := <-updates:
			if !ok {
				return err
			}
		case <-t.C:
			return errors.Join(err, fmt.Errorf("%w within %s", errWatchNotClosed, stopBudget))
		}
	}
}

// eachKey calls f with every key of kv that holds a value and matches one of filters (every
// key when there are none), in one pass of a watcher's initial values. It stands in for the
// SDK's ListKeys, whose goroutine stops reading its watcher when ctx ends and then calls a
// bare Stop, which leaves the SDK's delivery goroutine blocked (see StopWatch) on a bucket of
// more than 256 keys.
func eachKey(ctx context.Context, kv jetstream.KeyValue, filters []string, f func(string)) error {
	w, err := WatchKeys(ctx, kv, filters, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	return w.SyncInitial(ctx, func(e jetstream.KeyValueEntry) { f(e.Key()) })
}
