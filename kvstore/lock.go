package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Lock is a held TTL lock in a History-1 bucket with limit markers. Its revision is the fencing
// token: it changes on every renewal, and a renewal fails once someone else holds the key.
type Lock struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	key    string
	ttl    time.Duration
	rev    uint64
	record []byte
}

// ErrLockHeld means another holder has the lock.
var ErrLockHeld = errors.New("kvstore: lock held by another holder")

// AcquireLock creates key with a per-key TTL. ErrLockHeld if it exists.
func AcquireLock(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key, holder, purpose string, ttl time.Duration) (*Lock, error) {
	rec, err := json.Marshal(events.LockRecord{V: 1, Holder: holder, Purpose: purpose, Acquired: time.Now().UTC()})
	if err != nil {
		return nil, err
	}
	rev, err := kv.Create(ctx, key, rec, jetstream.KeyTTL(ttl))
	if err != nil {
		if err = mapErr(err); errors.Is(err, ErrConflict) {
			return nil, errors.Join(ErrLockHeld, err)
		}
		return nil, fmt.Errorf("acquire lock %s: %w", key, err)
	}
	return &Lock{js: js, kv: kv, key: key, ttl: ttl, rev: rev, record: rec}, nil
}

// Revision is the lock's current fencing token.
func (l *Lock) Revision() uint64 { return l.rev }

// Renew restarts the lock's TTL if it is still ours. ErrLockHeld (wrapped) once it is lost.
func (l *Lock) Renew(ctx context.Context) error {
	rev, err := PutTTL(ctx, l.js, l.kv, l.key, l.record, l.rev, l.ttl)
	if errors.Is(err, ErrConflict) {
		return errors.Join(ErrLockHeld, err)
	}
	if err != nil {
		return fmt.Errorf("renew lock %s: %w", l.key, err)
	}
	l.rev = rev
	return nil
}

// Release deletes the lock if it is still ours; releasing a lost lock is not an error.
func (l *Lock) Release(ctx context.Context) error {
	err := mapErr(l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev)))
	if err == nil || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return fmt.Errorf("release lock %s: %w", l.key, err)
}

// KeepRenewed renews the lock every interval (each renewal bounded by the interval) until
// ctx ends, when it returns nil, or a renewal fails, when it returns that error: the lock is
// then someone else's, or about to be. beat, if set, runs before each renewal (a message
// heartbeat that must keep pace with the lock).
func (l *Lock) KeepRenewed(ctx context.Context, every time.Duration, beat func()) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if beat != nil {
				beat()
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			err := l.Renew(rctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}
