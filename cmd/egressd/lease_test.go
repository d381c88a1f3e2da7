package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
)

// leaseService runs a lease service on an embedded server with one Ready proxy carrying
// credentials, and returns the server's URL.
func leaseService(t *testing.T) string {
	t.Helper()
	url, _ := leaseServiceStore(t)
	return url
}

// leaseServiceStore is leaseService, with the store it runs on.
func leaseServiceStore(t *testing.T) (string, *kvstore.Store) {
	t.Helper()
	srv, nc, js := kvstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{"provider": "local", "maxLeases": 2, "attributes": map[string]string{"geo": "de"},
		"auth": map[string]string{"username": "u", "password": "p@ss"}}
	if _, err := kvstore.PutJSON(ctx, store.Proxies, "de-1", spec); err != nil {
		t.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Provider: "local", Host: "local", IP: "127.0.0.9", Port: 3128}
	if _, err := kvstore.PutJSON(ctx, store.Status, "de-1", st); err != nil {
		t.Fatal(err)
	}
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(store), NC: nc, MinTTL: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("lease service not ready")
	}
	return srv.ClientURL(), store
}

func runLease(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCommand(t, leaseCmd, args...)
}

func TestLeaseCommand(t *testing.T) {
	url := leaseService(t)
	t.Setenv("NATS_URL", url)

	code, out, errs := runLease(t, "acquire", "--selector", "geo=de", "--target", "example.com", "--ttl", "90s", "--holder", "sh")
	var r events.LeaseReply
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Lease.Proxy != "de-1" || r.Lease.TTLSeconds != 90 {
		t.Fatalf("acquire: %d %q %q", code, out, errs)
	}
	code, out, errs = runLease(t, "acquire", "--nats-url", url, "--url-only", "--ttl", "60")
	if code != 0 || out != "http://u:p%40ss@127.0.0.9:3128\n" {
		t.Fatalf("acquire --url-only: %d %q %q", code, out, errs)
	}
	code, _, errs = runLease(t, "acquire")
	if code != 1 || !strings.Contains(errs, "503") || !strings.Contains(errs, "1 at capacity") {
		t.Fatalf("acquire with both slots held: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--min-anonymity", "elite")
	if code != 1 || !strings.Contains(errs, "503") || !strings.Contains(errs, "less anonymous than elite") {
		t.Fatalf("acquire --min-anonymity elite of an unjudged proxy: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--min-anonymity", "max")
	if code != 1 || !strings.Contains(errs, "400") || !strings.Contains(errs, "minAnonymity") {
		t.Fatalf("acquire --min-anonymity max: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--strategy", "least-used")
	if code != 1 || !strings.Contains(errs, "400") || !strings.Contains(errs, "strategy") {
		t.Fatalf("acquire --strategy least-used: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--tier", "pool=dc", "--tier", "pool=resi")
	if code != 1 || !strings.Contains(errs, "400") || !strings.Contains(errs, "need target") {
		t.Fatalf("acquire --tier without --target: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--target", "example.com", "--tier", "dc")
	if code != 2 || !strings.Contains(errs, "key=value") {
		t.Fatalf("acquire --tier dc: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--target", "example.com", "--tier", "pool=none", "--strategy", "best-for-target")
	if code != 1 || !strings.Contains(errs, "503") || !strings.Contains(errs, "0 match the selector") {
		t.Fatalf("acquire --tier pool=none: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--sticky", "s1", "--session", "10m", "--sticky-mode", "strict", "--strategy", "random")
	if code != 1 || !strings.Contains(errs, "503") || !strings.Contains(errs, "1 at capacity") {
		t.Fatalf("acquire a new strict session with both slots held: %d %q", code, errs)
	}
	code, _, errs = runLease(t, "acquire", "--sticky-mode", "strict")
	if code != 1 || !strings.Contains(errs, "400") || !strings.Contains(errs, "stickyMode") {
		t.Fatalf("acquire --sticky-mode strict without a session: %d %q", code, errs)
	}
	code, out, errs = runLease(t, "renew", "--id", r.Lease.ID, "--ttl", "120")
	if code != 0 || !strings.Contains(out, r.Lease.ID) || !strings.Contains(out, `"ttlSeconds":120`) {
		t.Fatalf("renew: %d %q %q", code, out, errs)
	}
	code, out, errs = runLease(t, "report", "--id", r.Lease.ID, "--result", "blocked", "--target", "example.com", "--cooldown", "60", "--release")
	if code != 0 || !strings.Contains(out, `"released":true`) || !strings.Contains(out, "cooldownUntil") {
		t.Fatalf("report: %d %q %q", code, out, errs)
	}
	code, out, _ = runLease(t, "release", r.Lease.ID)
	if code != 0 || !strings.HasPrefix(out, `{"released":false,"reason":"lease `+r.Lease.ID+` is unknown or has expired"`) {
		t.Fatalf("second release: %d %q", code, out)
	}
	code, _, errs = runLease(t, "renew", "--id", r.Lease.ID)
	if code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("renew a released lease: %d %q", code, errs)
	}
	code, out, errs = runLease(t, "acquire", "--selector", "geo=de", "--id-only")
	if id := strings.TrimSpace(out); code != 0 || !strings.HasPrefix(id, "de-1.") || strings.ContainsAny(id, " {\"") {
		t.Fatalf("acquire --id-only: %d %q %q", code, out, errs)
	}
	if code, out, _ = runLease(t, "release", strings.TrimSpace(out)); code != 0 || strings.TrimSpace(out) != `{"released":true}` {
		t.Fatalf("release of the --id-only lease: %d %q", code, out)
	}
	code, _, errs = runLease(t, "report", "--id", r.Lease.ID, "--result", "meh")
	if code != 1 || !strings.Contains(errs, "result") {
		t.Fatalf("report meh: %d %q", code, errs)
	}
	for _, args := range [][]string{{}, {"steal"}, {"renew"}, {"acquire", "--selector", "geo"}, {"acquire", "--ttl", "1.5s"},
		{"release", "a", "b"}, {"acquire", "--id", "x"}, {"acquire", "--url-only", "--id-only"}} {
		if code, _, _ := runLease(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, errs := runLease(t, "release", "--nats-url", "nats://127.0.0.1:1", "--timeout", "1s", "--id", r.Lease.ID); code != 1 || !strings.Contains(errs, "connect") {
		t.Fatalf("no server: %d %q", code, errs)
	}
}

func TestLeaseCommandWithoutAService(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	code, _, errs := runLease(t, "acquire", "--nats-url", srv.ClientURL())
	if code != 1 || !strings.Contains(errs, "no lease service is running") {
		t.Fatalf("%d %q", code, errs)
	}
}

// egressd lease acquire --wait: held while both slots are taken, granted when one is
// released; a wait in vain exits 1 with the 503 and how long it waited; a bad --wait exits 2.
func TestLeaseAcquireWait(t *testing.T) {
	url, store := leaseServiceStore(t)
	t.Setenv("NATS_URL", url)
	var ids []string
	for range 2 {
		code, out, errs := runLease(t, "acquire", "--id-only", "--ttl", "60")
		if code != 0 {
			t.Fatalf("acquire: %d %q", code, errs)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	type result struct {
		code      int
		out, errs string
	}
	got := make(chan result, 1)
	go func() {
		var out, errb strings.Builder
		code := leaseCmd(context.Background(), []string{"acquire", "--id-only", "--wait", "30s"}, &out, &errb)
		got <- result{code, out.String(), errb.String()}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for waiting := false; !waiting; {
		if time.Now().After(deadline) {
			t.Fatal("the acquire with --wait is not queued within 30s")
		}
		keys, err := store.LeaseState.ListKeys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys.Keys() {
			waiting = waiting || strings.HasPrefix(k, "wait.")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, errs := runLease(t, "release", ids[0]); code != 0 {
		t.Fatalf("release: %q", errs)
	}
	if r := <-got; r.code != 0 || !strings.HasPrefix(strings.TrimSpace(r.out), "de-1.") {
		t.Fatalf("acquire --wait: %d %q %q", r.code, r.out, r.errs)
	}
	code, _, errs := runLease(t, "acquire", "--wait", "1s")
	if code != 1 || !strings.Contains(errs, "503") || !strings.Contains(errs, "after waiting") {
		t.Fatalf("acquire --wait 1s with both slots held: %d %q", code, errs)
	}
	if code, _, errs := runLease(t, "acquire", "--wait", "61"); code != 1 || !strings.Contains(errs, "waitSeconds") {
		t.Fatalf("acquire --wait 61: %d %q", code, errs)
	}
	if code, _, _ := runLease(t, "acquire", "--wait", "0.5s"); code != 2 {
		t.Fatalf("acquire --wait 0.5s: exit %d, want 2", code)
	}
}
