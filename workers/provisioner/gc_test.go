package provisioner_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/provisioner"
)

type staticLeftovers []providers.Leftover

func (s staticLeftovers) Leftovers(context.Context) ([]providers.Leftover, error) { return s, nil }

// Leftovers (volumes without a domain) are collected only when no proxy holds their name and
// they were left alone for the minimum age.
func TestGCCollectsOnlyOldUnownedLeftovers(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := providers.InstanceName("inst", "live-uid")
	if _, err := kvstore.PutJSON(ctx, store.Status, "p1", events.ProxyStatus{V: 1, UID: "live-uid", InstanceName: live}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	leftovers := staticLeftovers{
		{ID: "fake/h1/egress-aaaaaaaaaaaaaaaa", Host: "h1", Name: "egress-aaaaaaaaaaaaaaaa", ModifiedAt: old},
		{ID: "fake/h1/" + live, Host: "h1", Name: live, ModifiedAt: old},
		{ID: "fake/h1/egress-bbbbbbbbbbbbbbbb", Host: "h1", Name: "egress-bbbbbbbbbbbbbbbb", ModifiedAt: time.Now()},
		{ID: "fake/h2/egress-cccccccccccccccc", Host: "h2", Name: "egress-cccccccccccccccc", ModifiedAt: old},
	}
	var deleted []string
	fake := providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2})
	fake.OnCall = func(op, name string) {
		if op == "delete" {
			deleted = append(deleted, name)
		}
	}
	p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: fake, Catalog: fake.Catalog(), Installation: "inst",
		Worker: "w1", Buckets: provisioner.BucketsOf(store), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		GC: provisioner.GC{Interval: time.Minute, MinAge: 10 * time.Minute}, Leftovers: leftovers})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 1 || deleted[0] != "egress-aaaaaaaaaaaaaaaa" {
		t.Fatalf("deleted %v, want only the old, unowned leftover on this host", deleted)
	}
}
