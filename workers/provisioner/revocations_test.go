package provisioner_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/provisioner"
)

// deliveries records what a follower delivers.
type deliveries struct {
	mu    sync.Mutex
	lists []*leaseauth.Revocations
}

func (d *deliveries) deliver(_ context.Context, l *leaseauth.Revocations) error {
	back, err := leaseauth.ParseRevocations(l.Encode()) // a copy
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists = append(d.lists, back)
	return err
}

func (d *deliveries) seen() []*leaseauth.Revocations {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*leaseauth.Revocations(nil), d.lists...)
}

// waitFor polls the deliveries until one passes ok.
func (d *deliveries) waitFor(t *testing.T, what string, ok func(*leaseauth.Revocations) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s := d.seen(); len(s) > 0 && ok(s[len(s)-1]) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no delivery %s", what)
}

func putRevocation(t *testing.T, store *kvstore.Store, proxy, id string, until time.Time) {
	t.Helper()
	b, _ := json.Marshal(events.LeaseRevocation{V: 1, Lease: id, Proxy: proxy, Until: until, Reason: events.ReasonReleased})
	if _, err := kvstore.PutTTL(context.Background(), store.JS, store.LeaseState, events.RevocationKey(id), b, 0, time.Until(until).Truncate(time.Second)+time.Second); err != nil {
		t.Fatal(err)
	}
}

func follow(t *testing.T, store *kvstore.Store, proxy string) *deliveries {
	t.Helper()
	d := &deliveries{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- provisioner.Revocations{KV: store.LeaseState, Proxy: proxy, Deliver: d.deliver, Batch: 10 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d
}

// The follower delivers the current list once the watch has brought every revocation (never
// a shorter one first, so a restart cannot unrevoke), then every new revocation; with Proxy
// set, only that proxy's; an entry drops once its tokens have expired. Holder slots and
// sessions in the same bucket are not revocations.
func TestRevocationsFollower(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	store, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	putRevocation(t, store, "p1", "p1.0.00000000000000aa", until)
	if _, err := store.LeaseState.Put(context.Background(), "holder._.eA.0", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	all, p2 := follow(t, store, ""), follow(t, store, "p2")
	all.waitFor(t, "with the revocation made before the start", func(l *leaseauth.Revocations) bool { return l.Len() == 1 })
	if first := all.seen()[0]; first.Check("p1.0.00000000000000aa", time.Now()) == nil {
		t.Fatal("the first delivery lacks a revocation made before the start")
	}
	p2.waitFor(t, "for p2, empty", func(l *leaseauth.Revocations) bool { return l.Len() == 0 })

	putRevocation(t, store, "p2", "p2.3.00000000000000bb", until)
	all.waitFor(t, "with the new revocation", func(l *leaseauth.Revocations) bool {
		return l.Len() == 2 && l.Check("p2.3.00000000000000bb", time.Now()) != nil
	})
	p2.waitFor(t, "with p2's revocation only", func(l *leaseauth.Revocations) bool {
		return l.Len() == 1 && l.Check("p2.3.00000000000000bb", time.Now()) != nil
	})

	ends := time.Now().Add(2 * time.Second)
	putRevocation(t, store, "p1", "p1.1.00000000000000cc", ends)
	all.waitFor(t, "with the short revocation", func(l *leaseauth.Revocations) bool { return l.Len() == 3 })
	all.waitFor(t, "without the entry that ended", func(l *leaseauth.Revocations) bool {
		return l.Len() == 2 && l.Check("p1.1.00000000000000cc", ends.Add(-time.Hour)) == nil
	})
}
