package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

func runStats(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCommand(t, statsCmd, args...)
}

// A bad flag is refused before any connection, with the flag named.
func TestStatsFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--by holder", `--by "holder": want target, proxy, provider or pool`},
		{"--since 1y", `--since "1y"`},
		{"--since 0s", `--since "0s"`},
		{"--top -1", `--top "-1"`},
		{"--sort up", `--sort "up": want rate or blocked`},
		{"extra", `unexpected argument "extra"`},
	} {
		code, _, errs := runStats(t, append(strings.Fields(c.args), "--nats-url", "nats://127.0.0.1:1")...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// Grouped by proxy, the table adds each proxy's provider and pool; a proxy of no pool says
// so; filters that keep nothing say that, not "no statistics".
func TestStatsByProxy(t *testing.T) {
	srv, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := events.LeaseStats{V: 1, Leaser: "m1", From: now.Add(-time.Minute), To: now, Rows: []events.LeaseStatsRow{
		{Proxy: "crawl-1", Target: "a.example", Provider: "local", Pool: "crawl", LeaseCounts: events.LeaseCounts{Granted: 5, OK: 1, Blocked: 1}},
		{Proxy: "crawl-1", Target: "b.example", Provider: "local", Pool: "crawl", LeaseCounts: events.LeaseCounts{Granted: 1, OK: 2}},
		{Proxy: "office", Target: "a.example", Provider: "external", LeaseCounts: events.LeaseCounts{Granted: 2, Blocked: 2, Failed: 1}},
	}}
	b, _ := json.Marshal(rec)
	if _, err := js.Publish(ctx, events.LeaseStatsSubject("m1"), b); err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	code, out, errs := runStats(t, "--nats-url", url, "--by", "proxy")
	want := "" +
		"PROXY     PROVIDER   POOL    LEASES   REPORTS   BLOCKED   FAILED   BLOCK RATE\n" +
		"office    external   -       2        3         2         1        66.7%\n" +
		"crawl-1   local      crawl   6        4         1         0        25.0%\n" +
		"(total)                      8        7         3         1        42.9%\n"
	if _, table, _ := strings.Cut(out, "\n"); code != 0 || table != want {
		t.Errorf("exit %d %s\n%s\nwant\n%s", code, errs, out, want)
	}
	if !strings.HasPrefix(out, "Block rate by proxy over the last 1h, highest block rate first (1 leaser record, one per 1m; ") {
		t.Errorf("header: %s", out)
	}
	if _, out, _ := runStats(t, "--nats-url", url, "--by", "pool", "--sort", "blocked"); !strings.Contains(out, "\n(no pool)   2 ") {
		t.Errorf("by pool:\n%s", out)
	}
	if code, out, _ := runStats(t, "--nats-url", url, "--pool", "batch"); code != 0 || out != "No statistics match the filters (1 leaser record in the last 1h).\n" {
		t.Errorf("filters that keep nothing: %d %q", code, out)
	}
}
