package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// healthy is a verdict at addr, probed at the given time.
func healthy(addr string, ok bool, at time.Time) events.ProxyHealth {
	h := events.ProxyHealth{V: 1, Address: addr, Healthy: ok, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: at}
	if !ok {
		h.ConsecutiveFailures = 3
	}
	return h
}

func seed(t *testing.T) (*kvstore.Store, *metrics.Metrics) {
	_, nc, js := kvstoretest.Start(t)
	ctx := context.Background()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kvstore.EnsureOps(ctx, js, "local", []kvstore.HostConfig{{Name: "local", MaxConcurrentOps: 2}}, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	put := func(kv jetstream.KeyValue, key string, v any) {
		if _, err := kvstore.PutJSON(ctx, kv, key, v); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	ready := func(ip string) events.ProxyStatus {
		return events.ProxyStatus{V: 1, Phase: events.PhaseReady, Provider: "local", IP: ip, Port: 3128, AddressAt: now.Add(-time.Hour)}
	}
	for _, name := range []string{"a", "b", "e", "f", "g"} {
		put(st.Proxies, name, json.RawMessage(`{"provider":"local"}`))
	}
	put(st.Status, "a", ready("127.0.0.2"))
	put(st.Status, "b", ready("127.0.0.3"))
	put(st.Status, "c", events.ProxyStatus{V: 1, Phase: events.PhaseInvalid})
	put(st.Status, "d", events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "external"})
	put(st.Status, "e", ready("127.0.0.4"))
	put(st.Status, "f", ready("127.0.0.5"))
	judged := func(h events.ProxyHealth, a events.Anonymity) events.ProxyHealth { h.Anonymity = a; return h }
	put(st.Health, "a", judged(healthy("127.0.0.2:3128", true, now), events.AnonymityElite))
	put(st.Health, "b", judged(healthy("127.0.0.3:3128", false, now), events.AnonymityTransparent))
	// Healthy, but about the address e had before, and f's verdict is five minutes old: not
	// their health now, and both are overdue. e's elite verdict is its predecessor's: unknown.
	put(st.Health, "e", judged(healthy("127.0.0.99:3128", true, now), events.AnonymityElite))
	put(st.Health, "f", healthy("127.0.0.5:3128", true, now.Add(-5*time.Minute)))
	// g was replaced ten seconds ago by an instance on the same address; its record is fresh
	// but from the predecessor, probed before the address reappeared: no verdict on g now.
	gs := ready("127.0.0.6")
	gs.AddressAt = now.Add(-10 * time.Second)
	put(st.Status, "g", gs)
	put(st.Health, "g", healthy("127.0.0.6:3128", true, now.Add(-20*time.Second)))
	put(st.Leases.Of("a"), "a.0", events.Lease{V: 1, Proxy: "a"})
	put(st.Leases.Of("a"), "a.1", events.Lease{V: 1, Proxy: "a", Slot: 1})
	put(st.Leases.Of("b"), "b.0", events.Lease{V: 1, Proxy: "b"})
	put(st.Providers, "local.local", events.TargetHealth{V: 1, Provider: "local", Target: "local", Ready: true, LatencyMs: 2.5})
	// Two ops queued for the host, none taken yet.
	for _, p := range []string{"a", "b"} {
		if _, err := js.Publish(ctx, events.OpSubject("local", "local", p), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	return st, metrics.New(st, nc, true)
}

func TestMetricsLintAndMatchKV(t *testing.T) {
	_, m := seed(t)
	m.ObserveOp("local", "create", "", 120*time.Millisecond)
	m.ObserveOp("local", "create", "Transient", time.Second)
	m.ObserveLease("acquire", "granted", time.Millisecond)
	m.ObserveWaiting(1)
	m.ObserveWaiting(1)
	m.ObserveWaiting(-1)
	m.ObserveWait("granted", 2*time.Second)
	m.ObserveViewStill("proxy_leases_1", true)
	m.ObserveDirectRead("proxy_leases_1", "ok")
	m.ObserveProbe(false, 5*time.Second)
	m.ObserveGC("local")
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP egress_proxies Proxies by provider and phase.
# TYPE egress_proxies gauge
egress_proxies{phase="Invalid",provider=""} 1
egress_proxies{phase="Ready",provider="local"} 5
egress_proxies{phase="Running",provider="external"} 1
# HELP egress_proxies_healthy Proxies with a current healthy verdict at the address they have now.
# TYPE egress_proxies_healthy gauge
egress_proxies_healthy 1
# HELP egress_proxies_anonymity Proxies with an address by the probers' anonymity verdict on it: elite, anonymous, transparent or unknown.
# TYPE egress_proxies_anonymity gauge
egress_proxies_anonymity{anonymity="anonymous"} 0
egress_proxies_anonymity{anonymity="elite"} 1
egress_proxies_anonymity{anonymity="transparent"} 1
egress_proxies_anonymity{anonymity="unknown"} 3
# HELP egress_proxies_probe_overdue Proxies whose last probe at their current address is overdue, by provider.
# TYPE egress_proxies_probe_overdue gauge
egress_proxies_probe_overdue{provider=""} 0
egress_proxies_probe_overdue{provider="external"} 0
egress_proxies_probe_overdue{provider="local"} 2
# HELP egress_leases_active Active lease slots, from proxy_leases.
# TYPE egress_leases_active gauge
egress_leases_active 3
# HELP egress_host_ops_pending Ops waiting for a provisioner, per host.
# TYPE egress_host_ops_pending gauge
egress_host_ops_pending{host="local",provider="local"} 2
# HELP egress_host_ops_in_flight Ops delivered to a provisioner and not yet settled, per host (the consumer's ack-pending count).
# TYPE egress_host_ops_in_flight gauge
egress_host_ops_in_flight{host="local",provider="local"} 0
# HELP egress_provider_target_up 1 when the provider target's last check was ready, from provider_health.
# TYPE egress_provider_target_up gauge
egress_provider_target_up{provider="local",target="local"} 1
# HELP egress_provider_ops_total Provider operations run by this process, by provider, op and result class.
# TYPE egress_provider_ops_total counter
egress_provider_ops_total{op="create",provider="local",result="Transient"} 1
egress_provider_ops_total{op="create",provider="local",result="ok"} 1
# HELP egress_gc_deletions_total Orphans deleted by this process's garbage collector.
# TYPE egress_gc_deletions_total counter
egress_gc_deletions_total{provider="local"} 1
# HELP egress_probe_failures_total Probes through proxies that failed.
# TYPE egress_probe_failures_total counter
egress_probe_failures_total 1
# HELP egress_lease_waiting Acquires this process's leaser holds until a slot frees (waitSeconds).
# TYPE egress_lease_waiting gauge
egress_lease_waiting 1
# HELP egress_lease_view_stands_still 1 while this process's leaser's view of a lease shard stands still (its watch echoes none of its writes) and it reads the shard directly (decision 100).
# TYPE egress_lease_view_stands_still gauge
egress_lease_view_stands_still{bucket="proxy_leases_1"} 1
# HELP egress_lease_view_direct_reads_total Batched direct reads of a lease shard's slots that this process's leaser made while its view of the shard stood still, by result (ok, error).
# TYPE egress_lease_view_direct_reads_total counter
egress_lease_view_direct_reads_total{bucket="proxy_leases_1",result="ok"} 1
`
	if n := testutil.CollectAndCount(m.Registry, "egress_lease_wait_seconds"); n != 1 {
		t.Errorf("egress_lease_wait_seconds has %d series, want 1 (granted)", n)
	}
	names := []string{"egress_lease_waiting", "egress_lease_view_stands_still", "egress_lease_view_direct_reads_total", "egress_proxies", "egress_proxies_healthy", "egress_proxies_anonymity", "egress_proxies_probe_overdue", "egress_leases_active", "egress_host_ops_pending", "egress_host_ops_in_flight",
		"egress_provider_target_up", "egress_provider_ops_total", "egress_gc_deletions_total", "egress_probe_failures_total"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// The values follow KV at scrape time: a change shows on the next scrape with no process
// having counted anything.
func TestMetricsFollowState(t *testing.T) {
	st, m := seed(t)
	if err := st.Leases.Of("a").Delete(context.Background(), "a.1"); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(healthy("127.0.0.3:3128", true, time.Now()))
	if _, err := st.Health.Put(context.Background(), "b", b); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP egress_leases_active Active lease slots, from proxy_leases.
# TYPE egress_leases_active gauge
egress_leases_active 2
# HELP egress_proxies_healthy Proxies with a current healthy verdict at the address they have now.
# TYPE egress_proxies_healthy gauge
egress_proxies_healthy 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_leases_active", "egress_proxies_healthy"); err != nil {
		t.Fatal(err)
	}
}

func TestHandler(t *testing.T) {
	_, m := seed(t)
	var down, unready error
	srv := httptest.NewServer(m.Handler(func() error { return down }, func() error { return unready }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "egress_proxies{") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d\n%.300s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	unready = errors.New("starting")
	if code, body := get("/readyz"); code != 503 || body != "not ready: starting\n" {
		t.Fatalf("/readyz when starting: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz while not ready: %d, want alive", code)
	}
	down = errors.New("nats disconnected")
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "nats disconnected") {
		t.Fatalf("/healthz when down: %d %q", code, body)
	}
}
