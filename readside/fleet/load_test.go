package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

func newStore(tb testing.TB) *kvstore.Store {
	tb.Helper()
	_, _, js := kvstoretest.Start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func load(t *testing.T, b fleet.Buckets, now time.Time) *fleet.Fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fleet.Load(ctx, b, now)
}

func TestLoadMixedFleet(t *testing.T) {
	st := newStore(t)
	now := time.Now()
	want := fleettest.Mixed(t, st, now)
	f := load(t, fleet.FromStore(st), now)
	if len(f.Errors) != 0 {
		t.Fatalf("errors: %v", f.Errors)
	}
	tot := f.Totals
	if fmt.Sprint(tot.Phases) != fmt.Sprint(want.Phases) || tot.Healthy != want.Healthy || tot.Unhealthy != want.Unhealthy ||
		tot.ProbeOverdue != want.ProbeOverdue || tot.Leases != want.Leases || tot.Proxies != 13 || tot.HealthUnknown != 13-4 {
		t.Errorf("totals %+v\nwant %+v", tot, want)
	}
	if fmt.Sprint(tot.Anonymity) != fmt.Sprint(want.Anonymity) {
		t.Errorf("anonymity totals %v, want %v", tot.Anonymity, want.Anonymity)
	}
	// rows: name phase healthy overdue leases/max reason
	wantRows := []string{
		"bad Invalid unknown false 0/? InvalidSpec",
		"broken Failed unknown false 0/1 PermanentError",
		"gone Deleting unknown false 1/- ProxyDeleted",
		"moved Running unknown true 0/1 ProbeOverdue",
		"new Running unknown false 0/1 ",
		"office Ready unknown true 1/3 ProbeOverdue",
		"pending Pending unknown false 0/1 ",
		"ready-de Ready True false 2/2 ",
		"ready-fr Ready True false 0/1 EgressMismatch",
		"ready-stale Ready unknown true 0/1 ProbeOverdue",
		"sick Unhealthy False false 0/1 ProbeFailing",
		"slow Ready True false 0/1 ",
		"swap Replacing unknown false 0/1 SpecChanged",
	}
	var got []string
	for _, r := range f.Rows {
		got = append(got, fmt.Sprintf("%s %s %s %t %s %s", r.Name, r.Phase, r.Healthy, r.ProbeOverdue, r.LeasesText(), r.Reason))
	}
	if strings.Join(got, "\n") != strings.Join(wantRows, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}
	byName := map[string]fleet.Row{}
	for _, r := range f.Rows {
		byName[r.Name] = r
	}
	if r := byName["office"]; r.Provider != events.External || r.Mode != "external" || r.Address != "127.0.0.50:8080" ||
		r.Anonymity != "" || r.EgressMismatch {
		t.Errorf("office: %+v", r)
	}
	if r := byName["ready-fr"]; r.Anonymity != events.AnonymityAnonymous || !r.EgressMismatch || fmt.Sprint(r.LeakedHeaders) != "[Via]" {
		t.Errorf("ready-fr: anonymity %q leaked %v mismatch %v", r.Anonymity, r.LeakedHeaders, r.EgressMismatch)
	}
	if r := byName["sick"]; r.Anonymity != events.AnonymityTransparent || fmt.Sprint(r.LeakedHeaders) != "[Via X-Forwarded-For]" || r.EgressMismatch {
		t.Errorf("sick: anonymity %q leaked %v mismatch %v", r.Anonymity, r.LeakedHeaders, r.EgressMismatch)
	}
	if r := byName["moved"]; r.Anonymity != "" || r.LeakedHeaders != nil {
		t.Errorf("moved: a verdict about its old address shows as %q %v", r.Anonymity, r.LeakedHeaders)
	}
	if r := byName["ready-de"]; r.Attributes["geo"] != "de" || r.Status == nil || r.Status.IP != "127.0.0.2" || r.Age != "1h" || r.LastProbeAt.IsZero() {
		t.Errorf("ready-de: %+v", r)
	}
	if r := byName["pending"]; r.Status != nil || r.Mode != "managed" || r.CreatedAt.IsZero() {
		t.Errorf("pending: %+v", r)
	}
	// The password in ready-de's spec is nowhere in the model.
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "SENTINEL-PASSWORD") {
		t.Error("the model holds a password from a spec")
	}
}

// A reader without read access to specs (nil Proxies) gets rows from the statuses alone; one
// whose reads fail gets an error per bucket and an empty fleet, never a panic.
func TestLoadPartial(t *testing.T) {
	st := newStore(t)
	now := time.Now()
	fleettest.Mixed(t, st, now)
	b := fleet.FromStore(st)
	b.Proxies = nil
	f := load(t, b, now)
	if len(f.Errors) != 0 || f.Totals.Proxies != 12 || f.Totals.ProbeOverdue != 0 {
		t.Errorf("without specs: %d rows, %d overdue, errors %v; want 12, 0 (no interval to judge by), none",
			f.Totals.Proxies, f.Totals.ProbeOverdue, f.Errors)
	}
	for _, r := range f.Rows {
		if r.MaxLeases != nil || r.Attributes != nil {
			t.Errorf("%s has spec fields without a spec: %+v", r.Name, r)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = fleet.Load(ctx, fleet.FromStore(st), now)
	var buckets []string
	for _, e := range f.Errors {
		buckets = append(buckets, e.Bucket)
		if !errors.Is(e, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled wrapped", e.Bucket, e)
		}
	}
	if strings.Join(buckets, " ") != "pool_demand pool_status pools proxies proxy_health proxy_leases proxy_status" || len(f.Rows) != 0 {
		t.Errorf("errors for %v, %d rows", buckets, len(f.Rows))
	}
}
