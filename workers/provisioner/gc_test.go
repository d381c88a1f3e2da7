package provisioner_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
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
	// A proxy rolled successor first (decision 98) holds its successor's and its retiring
	// instances' names too.
	succ, retiring := providers.SuccessorName("inst", "live-uid", "g3"), providers.SuccessorName("inst", "live-uid", "g1")
	if _, err := kvstore.PutJSON(ctx, store.Status, "p1", events.ProxyStatus{V: 1, UID: "live-uid", InstanceName: live, InstanceID: "fake/h1/" + live,
		Successor: &events.InstanceRef{Name: succ}, Retiring: []events.InstanceRef{{Name: retiring, ID: "fake/h1/" + retiring}}}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	leftovers := staticLeftovers{
		{ID: "fake/h1/egress-aaaaaaaaaaaaaaaa", Host: "h1", Name: "egress-aaaaaaaaaaaaaaaa", ModifiedAt: old},
		{ID: "fake/h1/" + live, Host: "h1", Name: live, ModifiedAt: old},
		{ID: "fake/h1/" + succ, Host: "h1", Name: succ, ModifiedAt: old},
		{ID: "fake/h1/" + retiring, Host: "h1", Name: retiring, ModifiedAt: old},
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

// An instance whose own mark says its lifetime has ended is deleted by the collector, a live
// proxy's too, with a gc event saying why; one within its lifetime, one without, and one of
// another installation are left alone.
func TestGCDeletesInstancesPastTheirLifetime(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2})
	create := func(uid, installation string, lifetime time.Duration) providers.Instance {
		inst, err := fake.Create(ctx, providers.CreateRequest{Name: providers.InstanceName(installation, uid), UID: uid,
			Installation: installation, Host: "h1", Port: 3128, Lifetime: lifetime})
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	expired := create("expired-uid", "inst", time.Nanosecond)
	create("young-uid", "inst", time.Hour)
	create("ageless-uid", "inst", 0)
	create("theirs-uid", "other", time.Nanosecond)
	for _, uid := range []string{"expired-uid", "young-uid", "ageless-uid"} {
		st := events.ProxyStatus{V: 1, UID: uid, InstanceName: providers.InstanceName("inst", uid)}
		if _, err := kvstore.PutJSON(ctx, store.Status, uid, st); err != nil {
			t.Fatal(err)
		}
	}
	var deleted []string
	fake.OnCall = func(op, name string) {
		if op == "delete" {
			deleted = append(deleted, name)
		}
	}
	p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: fake, Catalog: fake.Catalog(), Installation: "inst",
		Worker: "w1", Buckets: provisioner.BucketsOf(store), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		GC: provisioner.GC{Interval: time.Second, MinAge: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 1 || deleted[0] != expired.Name {
		t.Fatalf("deleted %v, want only %s, the live proxy's instance past its lifetime", deleted, expired.Name)
	}
	if _, err := fake.Get(ctx, expired.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("Get(%s) after the sweep: %v, want ErrNotFound", expired.ID, err)
	}
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, events.EventSubject(events.KindGC, "fake"))
	if err != nil {
		t.Fatalf("no gc event: %v", err)
	}
	var ev events.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Reason != events.ReasonLifetimeExceeded || ev.GC == nil || ev.GC.ID != expired.ID || ev.GC.ExpiresAt.IsZero() ||
		!strings.Contains(ev.Message, "lifetime") {
		t.Errorf("gc event %+v (gc %+v), want reason %s for %s with its expiry", ev, ev.GC, events.ReasonLifetimeExceeded, expired.ID)
	}
}
