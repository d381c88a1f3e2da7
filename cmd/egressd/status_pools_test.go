package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/egressd/egressd/readside/statuspage"
	"github.com/nats-io/nats.go"
)

// poolsFleet is an embedded server holding fleettest.Pools, written straight into the
// buckets as the pool controller and the reconciler would have.
func poolsFleet(t *testing.T) (string, *kvstore.Store, fleettest.PoolWant) {
	t.Helper()
	srv, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), store, fleettest.Pools(t, store, time.Now())
}

func TestStatusPools(t *testing.T) {
	url, _, _ := poolsFleet(t)
	code, out, errs := runStatus(t, "pools", "--nats-url", url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"NAME PHASE DESIRED MEMBERS READY LEASED DRAINING OLDEST NEXT-ROTATION REASON",
		"broken Invalid ? 0 0 0 0 - - InvalidSpec",
		"crawl Progressing 3 4 3 3 1 5h in 2h MaxAge",
		"old Deleting - 1 0 0 0 2d - PoolDeleted",
		"web Pending 2 0 0 0 0 - - -",
		"broken: replicas: is required (0 to 1000), unless autoscale is given",
	} {
		if !strings.Contains(spaced(out), "\n"+want+"\n") {
			t.Errorf("table lacks\n%s\nin\n%s", want, out)
		}
	}
	if strings.Contains(out, fleettest.SentinelPoolSecret) {
		t.Error("the table shows a template's secret")
	}

	code, out, _ = runStatus(t, "pools", "-o", "json", "--nats-url", url)
	var pools []fleet.PoolRow
	if err := json.Unmarshal([]byte(out), &pools); code != 0 || err != nil {
		t.Fatalf("json: exit %d, %v\n%s", code, err, out)
	}
	if len(pools) != 4 || pools[1].Name != "crawl" || pools[1].Status == nil || len(pools[1].Status.Members) != 4 ||
		pools[1].Status.Members[0].Successor != "crawl-ddddd" || *pools[1].Desired != 3 || pools[1].Draining != 1 {
		t.Errorf("json pools: %s", out)
	}
	if strings.Contains(out, fleettest.SentinelPoolSecret) || strings.Contains(out, "cloud-config") {
		t.Error("the JSON shows a template's secret")
	}
}

// --pool selects a pool's members by their spec's owner; a hand-written pool attribute is
// only matched by --selector.
func TestStatusPoolFilter(t *testing.T) {
	url, store, _ := poolsFleet(t)
	fleettest.Put(t, store.Proxies, "lookalike", []byte(`{"provider":"local","attributes":{"pool":"crawl"}}`))
	for _, c := range []struct {
		args  []string
		names string
	}{
		{[]string{"--pool", "crawl"}, "crawl-aaaaa crawl-bbbbb crawl-ccccc crawl-ddddd"},
		{[]string{"--pool", "crawl", "--phase", "Draining"}, "crawl-aaaaa"},
		{[]string{"--pool", "old"}, "old-eeeee"},
		{[]string{"--selector", "pool=crawl"}, "crawl-aaaaa crawl-bbbbb crawl-ccccc crawl-ddddd lookalike"},
	} {
		code, out, errs := runStatus(t, append([]string{"--nats-url", url}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		if got := tableNames(out); got != c.names {
			t.Errorf("%v: rows %q, want %q\n%s", c.args, got, c.names, out)
		}
	}
	if code, _, errs := runStatus(t, "pools", "--pool", "crawl", "--nats-url", url); code != 2 || !strings.Contains(errs, "do not apply") {
		t.Errorf("--pool on the pools view: exit %d, %q", code, errs)
	}
}

func TestStatusNoPools(t *testing.T) {
	url, _, _, _ := mixedFleet(t)
	code, out, _ := runStatus(t, "pools", "--nats-url", url)
	if code != 0 || !strings.HasPrefix(out, "No pools. Declare one with: nats kv put pools") {
		t.Errorf("exit %d: %q", code, out)
	}
	if _, out, _ = runStatus(t, "pools", "-o", "json", "--nats-url", url); strings.TrimSpace(out) != "[]" {
		t.Errorf("json: %q", out)
	}
}

// For one KV state, `egressd status pools -o json`, the status page's JSON and /metrics say
// the same about each pool.
func TestPoolViewsAgree(t *testing.T) {
	url, store, want := poolsFleet(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	line := func(p fleet.PoolRow) string {
		return fmt.Sprintf("%s %s %d %d %d %d %s", p.Phase, p.DesiredText(), p.Members, p.Ready, p.Leased, p.Draining, p.Oldest)
	}
	_, out, _ := runStatus(t, "pools", "-o", "json", "--nats-url", url)
	var cliPools []fleet.PoolRow
	if err := json.Unmarshal([]byte(out), &cliPools); err != nil {
		t.Fatal(err)
	}
	cli := map[string]string{}
	for _, p := range cliPools {
		cli[p.Name] = line(p)
	}

	page, err := statuspage.New(statuspage.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/api/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var snap statuspage.Snapshot
	err = json.NewDecoder(res.Body).Decode(&snap)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	pg := map[string]string{}
	for _, p := range snap.Pools {
		pg[p.Name] = line(p)
	}

	msrv := httptest.NewServer(metrics.New(store, nc, true).Handler(func() error { return nil }, func() error { return nil }))
	defer msrv.Close()
	mres, err := http.Get(msrv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	text := string(b)
	met := map[string]string{}
	for _, p := range cliPools {
		l := `pool="` + p.Name + `"`
		// A pool without the gauge reads as one without a readable spec.
		fromMetrics := fleet.PoolRow{Phase: p.Phase}
		if strings.Contains(text, "egress_pool_desired{"+l+"}") {
			n := int(sample(t, text, "egress_pool_desired", l))
			fromMetrics.Desired = &n
		}
		met[p.Name] = fmt.Sprintf("%s %s %d %d %d %d %s", p.Phase, fromMetrics.DesiredText(), int(sample(t, text, "egress_pool_members", l)),
			int(sample(t, text, "egress_pool_ready", l)), int(sample(t, text, "egress_pool_leased", l)),
			int(sample(t, text, "egress_pool_draining", l)), p.Oldest)
		if sample(t, text, "egress_pool_info", l+`,phase="`+string(p.Phase)+`"`) != 1 &&
			sample(t, text, "egress_pool_info", `phase="`+string(p.Phase)+`",`+l) != 1 {
			t.Errorf("egress_pool_info has no %s with phase %s", p.Name, p.Phase)
		}
	}
	for name, got := range map[string]map[string]string{"egressd status pools": cli, "status page": pg, "metrics": met} {
		if fmt.Sprint(got) != fmt.Sprint(map[string]string(want)) {
			t.Errorf("%s: %v\nwant %v", name, got, want)
		}
	}
}

// Pool specs hold a template's secrets as proxy specs do: a user denied them (but not the
// statuses) gets a note and exit 0; a denied pool_status is a failure like any other read.
func TestDeniedPoolReads(t *testing.T) {
	denied := func(bucket string) fleet.ReadError {
		return fleet.ReadError{Bucket: bucket, Err: fmt.Errorf("read bucket %s: %w", bucket,
			&deniedError{Bucket: bucket, Op: "publish", Subject: "$JS.API.CONSUMER.CREATE.KV_" + bucket, User: "viewer"})}
	}
	for _, c := range []struct {
		errs []fleet.ReadError
		code int
		note string
	}{
		{[]fleet.ReadError{denied("pools")}, 0, "pools come from the controller's statuses alone"},
		{[]fleet.ReadError{denied("pools"), denied("proxies")}, 0, "rows come from the statuses alone"},
		{[]fleet.ReadError{denied("pool_status")}, 1, "read bucket pool_status: permission denied"},
		{[]fleet.ReadError{denied("pool_demand")}, 0, "the leasers' demand is not shown"},
	} {
		var b strings.Builder
		if code := reportReadErrors(&b, c.errs); code != c.code || !strings.Contains(b.String(), c.note) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.errs, code, b.String(), c.code, c.note)
		}
	}
}

// A pool the brake holds says so under the table, with the numbers.
func TestPrintPoolsSuspect(t *testing.T) {
	var b strings.Builder
	n := 4
	printPools(&b, []fleet.PoolRow{{Name: "crawl", Phase: "Ready", Desired: &n, Members: 4, Oldest: "1h",
		Suspect: &events.Suspect{Scope: events.SuspectPool, Name: "crawl", Unhealthy: 3, Total: 4}}}, time.Now())
	if want := "crawl: pool crawl is Suspect: 3 of 4 proxies Unhealthy at once"; !strings.Contains(b.String(), want) {
		t.Errorf("lacks %q:\n%s", want, b.String())
	}
}

// An autoscaled pool shows its demand and its autoscaler's inputs, last decision and next
// possible scale-down under the table.
func TestPrintPoolsAutoscale(t *testing.T) {
	var b strings.Builder
	n, now := 2, time.Now()
	printPools(&b, []fleet.PoolRow{{Name: "web", Phase: "Ready", Desired: &n, Members: 2, Oldest: "1m",
		Demand: &events.DemandSum{Held: 2, Waiting: 1, Refused: 3, GrantsPerSecond: 0.5, Leasers: 2},
		Autoscale: &fleet.AutoscaleRow{Min: 0, Max: 3, State: &events.PoolAutoscale{Desired: 2,
			Inputs:       events.ScaleInputs{Held: 2, Waiting: 1, Refused: 3, Ready: 2, Capacity: 2, Target: 0.8, Wanted: 3},
			LastDecision: "0 → 2: 3 refused, 0/0 leased, target 0.8", LastDecisionAt: now.Add(-time.Minute),
			NextScaleDown: now.Add(4 * time.Minute)}}}}, now)
	for _, want := range []string{
		"web: demand 1 waiting, 3 refused, 2 held, 0.5 grants/s (2 leasers)",
		"web: autoscale 0 to 3, wants 3 (2 held of 2 on 2 Ready, 1 waiting, 3 refused, target 0.8); last 0 → 2: 3 refused, 0/0 leased, target 0.8, 1m ago; next scale-down in 4m",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}

// Spares, boot times and placements show under the table: the spares computed and how, the
// boots' p50 and p90, members per placement and a hold with its reason.
func TestPrintPoolsSparesAndPlacements(t *testing.T) {
	var b strings.Builder
	n, now := 3, time.Now()
	printPools(&b, []fleet.PoolRow{{Name: "web", Phase: "Ready", Desired: &n, Members: 3, Oldest: "1m",
		Reason:  events.ReasonPlacementFallback,
		Message: "3 of 3 members Ready; placement 0 (local tight) is held (QuotaExceeded) until 2026-12-03T12:05:00Z: new members go to placement 1 (roomy)",
		Autoscale: &fleet.AutoscaleRow{Min: 0, Max: 9, Spares: "auto", State: &events.PoolAutoscale{Desired: 3,
			Inputs: events.ScaleInputs{Held: 1, Ready: 3, Capacity: 3, Target: 1, Wanted: 3, GrantsPerSecond: 0.2,
				Spares: 2, SparesFrom: "auto: 0.2 grants/s over 5s"}}},
		Boot: &events.BootStats{Samples: 4, P50Seconds: 1.5, P90Seconds: 5},
		Placements: []events.PlacementStatus{
			{Index: 0, Provider: "tight", Members: 1, Ready: 1, Hold: &events.PlacementHold{Reason: events.ReasonQuota,
				Message: "address pool exhausted", Until: now.Add(5 * time.Minute)}},
			{Index: 1, Provider: "roomy", Members: 2, Ready: 2}}}}, now)
	for _, want := range []string{
		"web: 3 of 3 members Ready; placement 0 (local tight) is held (QuotaExceeded)",
		"; spares auto: 2 (auto: 0.2 grants/s over 5s)",
		"web: boot p50 1.5s, p90 5s (last 4)",
		"web: placements 0 tight: 1 (1 Ready), held QuotaExceeded (address pool exhausted) until in 5m; 1 roomy: 2 (2 Ready)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}
