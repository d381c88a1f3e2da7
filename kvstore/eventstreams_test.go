package kvstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEventStreamOfEveryKind(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, k := range events.Kinds {
		kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: k, Proxy: "px-1"})
		want := events.EventStream(k)
		for _, name := range []string{events.StreamEvents, events.StreamLeaseEvents} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.GetLastMsgForSubject(ctx, events.EventSubject(k, "px-1"))
			if stored := err == nil; stored != (name == want) {
				t.Errorf("kind %s on %s: stored %v (err %v), want it only on %s", k, name, stored, err, want)
			}
		}
	}
	for _, k := range []events.EventKind{events.KindLease, events.KindReport} {
		if events.EventStream(k) != events.StreamLeaseEvents {
			t.Errorf("%s is not on the lease stream", k)
		}
	}
}

func TestEventLimitsAreConfigurableAndChecked(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	lim := kvstore.EventLimits{Lifecycle: kvstore.StreamLimits{MaxAge: 90 * 24 * time.Hour},
		Leases: kvstore.StreamLimits{MaxAge: 3 * time.Hour, MaxBytes: 1 << 20}}
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{Events: lim}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]kvstore.StreamLimits{
		events.StreamEvents:      {MaxAge: 90 * 24 * time.Hour, MaxBytes: kvstore.DefaultLifecycleMaxBytes},
		events.StreamLeaseEvents: {MaxAge: 3 * time.Hour, MaxBytes: 1 << 20},
	} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := s.CachedInfo().Config
		if c.MaxAge != want.MaxAge || c.MaxBytes != want.MaxBytes {
			t.Errorf("%s: MaxAge %s MaxBytes %d, want %s %d", name, c.MaxAge, c.MaxBytes, want.MaxAge, want.MaxBytes)
		}
	}
	for _, tc := range []struct {
		lim  kvstore.EventLimits
		want string
	}{
		{kvstore.EventLimits{Lifecycle: kvstore.StreamLimits{MaxAge: time.Second}}, "events.lifecycle.maxAge"},
		{kvstore.EventLimits{Leases: kvstore.StreamLimits{MaxBytes: 100}}, "events.leases.maxBytes"},
		{kvstore.EventLimits{Leases: kvstore.StreamLimits{MaxAge: -time.Hour}}, "events.leases.maxAge"},
	} {
		_, err := kvstore.Ensure(ctx, js, kvstore.Options{Events: tc.lim})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure with %+v: %v, want an error naming %s", tc.lim, err, tc.want)
		}
	}
}

// TestUpgradeNarrowsOldEvents declares EGRESS_EVENTS as egressd did before the split (every
// event on one stream), stores events of both sorts, and runs the new Ensure: the lifecycle
// history stays, the old lease events go, and new lease events land on the lease stream.
func TestUpgradeNarrowsOldEvents(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	testUpgrade(t, js, 1)
}

// The same on a three-server cluster with three replicas, as `egressd setup --replicas 3`.
func TestUpgradeNarrowsOldEventsOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster")
	}
	c := kvstoretest.StartCluster(t, 3)
	_, js := kvstoretest.Connect(t, c.Servers[0])
	testUpgrade(t, js, 3)
}

func testUpgrade(t *testing.T, js jetstream.JetStream, replicas int) {
	// The test's budget: the client's default of 5 s a call is short for an R3 file stream
	// on three -race servers sharing a loaded machine ("context deadline exceeded" seen).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.StreamEvents, Subjects: []string{events.EventsSubjects},
		Retention: jetstream.LimitsPolicy, MaxAge: 7 * 24 * time.Hour, MaxBytes: 256 << 20, Storage: jetstream.FileStorage,
		Replicas: replicas, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: events.KindPhase, Proxy: "px-1", Phase: events.PhaseReady})
	kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: events.KindOpResult, Proxy: "px-1"})
	for i := range 10 {
		kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: events.KindLease, Proxy: "px-1", ID: fmt.Sprint("old-lease-", i),
			Reason: events.ReasonGranted, Lease: &events.LeaseEvent{ID: "x"}})
	}
	kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: events.KindReport, Proxy: "px-1", Lease: &events.LeaseEvent{ID: "x"}})
	for range 2 { // the second run is a plain restart
		if _, err := kvstore.Ensure(ctx, js, kvstore.Options{Replicas: replicas}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.EventsSubjects))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.Config.Subjects, events.EventStreamSubjects(events.StreamEvents); !slices.Equal(got, want) {
		t.Errorf("EGRESS_EVENTS subjects %v, want %v", got, want)
	}
	if info.Config.MaxAge != kvstore.DefaultLifecycleMaxAge || info.Config.MaxBytes != kvstore.DefaultLifecycleMaxBytes || info.Config.Replicas != replicas {
		t.Errorf("EGRESS_EVENTS limits %s %d, want the lifecycle defaults", info.Config.MaxAge, info.Config.MaxBytes)
	}
	if info.State.Msgs != 2 {
		t.Errorf("EGRESS_EVENTS holds %d events (%v), want the phase and the op result only", info.State.Msgs, info.State.Subjects)
	}
	for _, k := range []events.EventKind{events.KindPhase, events.KindOpResult} {
		if _, err := s.GetLastMsgForSubject(ctx, events.EventSubject(k, "px-1")); err != nil {
			t.Errorf("%s event lost in the upgrade: %v", k, err)
		}
	}
	kvstoretest.PublishEvent(t, js, events.Event{V: 1, Kind: events.KindLease, Proxy: "px-1", Lease: &events.LeaseEvent{ID: "y"}})
	ls, err := js.Stream(ctx, events.StreamLeaseEvents)
	if err != nil {
		t.Fatal(err)
	}
	if li, err := ls.Info(ctx); err != nil || li.State.Msgs != 1 {
		t.Fatalf("lease stream after the upgrade: %+v %v, want the one new lease event", li, err)
	}
}
