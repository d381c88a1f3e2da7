package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Leader runs a function only while it holds a TTL lease in the locks bucket. A standby
// watches the key and takes over as soon as the lease expires (within TTL of the leader's
// last renewal, so within TTL of its death), and the leader stops as soon as a renewal fails.
type Leader struct {
	JS     jetstream.JetStream
	Locks  jetstream.KeyValue
	Key    string
	Holder string
	TTL    time.Duration
	Log    *slog.Logger
}

// Run blocks until ctx ends, running lead whenever this process holds the lease. lead's
// context is cancelled when the lease is lost.
func (l *Leader) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	for ctx.Err() == nil {
		lock, err := kvstore.AcquireLock(ctx, l.JS, l.Locks, l.Key, l.Holder, "leader", l.TTL)
		if err != nil {
			if !errors.Is(err, kvstore.ErrLockHeld) && ctx.Err() == nil {
				l.Log.Warn("leader election", "key", l.Key, "err", err)
			}
			l.waitForExpiry(ctx)
			continue
		}
		l.Log.Info("became leader", "key", l.Key, "holder", l.Holder)
		err = l.hold(ctx, lock, lead)
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = lock.Release(relCtx)
		cancel()
		if err != nil && ctx.Err() == nil {
			l.Log.Error("leader stopped", "key", l.Key, "err", err)
			sleep(ctx, time.Second)
		}
	}
	return nil
}

// hold runs lead under a context that ends when a renewal fails.
func (l *Leader) hold(ctx context.Context, lock *kvstore.Lock, lead func(context.Context) error) error {
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- lead(leadCtx) }()
	renewed := make(chan error, 1)
	go func() { renewed <- lock.KeepRenewed(leadCtx, l.TTL/3, nil) }()
	select {
	case err := <-done:
		cancel()
		<-renewed
		return err
	case err := <-renewed:
		if err != nil {
			l.Log.Warn("lost leadership", "key", l.Key, "err", err)
		}
		cancel()
		<-done
		return nil
	}
}

// waitForExpiry returns when the lease key is deleted or expires, or after a poll interval.
func (l *Leader) waitForExpiry(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, l.TTL)
	defer cancel()
	w, err := l.Locks.Watch(wctx, l.Key, jetstream.UpdatesOnly())
	if err != nil {
		sleep(wctx, l.TTL/4)
		return
	}
	defer func() { _ = kvstore.StopWatch(w) }()
	for {
		select {
		case <-wctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
