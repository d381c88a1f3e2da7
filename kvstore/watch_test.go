package kvstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// fullThenCancel is a real bucket whose watches, once the SDK has filled their channel (its
// delivery goroutine is then blocked on the next send), end the reader's context: the moment
// a reader of a busy bucket stops reading.
type fullThenCancel struct {
	jetstream.KeyValue
	t      *testing.T
	cancel context.CancelFunc
}

func (b fullThenCancel) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return b.WatchFiltered(ctx, nil, opts...)
}

func (b fullThenCancel) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := b.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(w.Updates()) < cap(w.Updates()) {
		if time.Now().After(deadline) {
			b.t.Errorf("the watch of %s never filled its channel (%d of %d)", b.Bucket(), len(w.Updates()), cap(w.Updates()))
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.cancel()
	return w, nil
}

// A reader that stops reading a watch while the SDK still has entries for it must not leave
// the SDK's delivery goroutine behind, blocked on the full channel: Latest and Held, each
// cancelled once their watch's channel is full, leave no goroutine.
func TestStoppedWatchLeavesNoGoroutine(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	// Many more keys than the SDK's channel holds (256).
	for i := range 2000 {
		if _, err := kv.Put(ctx, fmt.Sprintf("p%d.%d", i%10, i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		read func(ctx context.Context, kv jetstream.KeyValue) error
	}{
		{"Latest", func(ctx context.Context, kv jetstream.KeyValue) error {
			_, err := Latest(ctx, kv)
			return err
		}},
		{"Held", func(ctx context.Context, kv jetstream.KeyValue) error {
			_, err := LeaseShards{kvs: []jetstream.KeyValue{kv}}.Held(ctx)
			return err
		}},
		{"Held of some proxies", func(ctx context.Context, kv jetstream.KeyValue) error {
			_, err := LeaseShards{kvs: []jetstream.KeyValue{kv}}.Held(ctx, "p1", "p2", "p3")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			err := tc.read(rctx, fullThenCancel{KeyValue: kv, t: t, cancel: cancel})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			goleak.VerifyNone(t, before)
		})
	}
}
