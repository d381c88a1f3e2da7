package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet"
)

// writeProviders writes a config with one local provider per name, provider i on the
// addresses 127.0.<net+i>.x.
func writeProviders(t *testing.T, path string, net int, names ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:\n")
	for i, name := range names {
		fmt.Fprintf(&b, "  - name: %s\n    type: local\n    local:\n      addresses: [127.0.%d.2-127.0.%d.250]\n      bindSource: true\n", name, net+i, net+i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A provider dropped from the config leaves the catalog when egressd restarts with that
// config: the spec that names it turns Invalid, naming the field and saying its instance is
// left alone, and that instance keeps running, untouched; the other provider's proxy goes on.
// Configured again, the provider's proxy is managed again, and deleted to the end.
func TestRemovedProviderLeavesTheCatalog(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	writeProviders(t, cfg, 41, "keep", "gone")
	n := startNode(t, dir, "--config", cfg)
	n.nats("kv", "put", "proxies", "pk", `{"provider":"keep"}`)
	n.nats("kv", "put", "proxies", "pg", `{"provider":"gone"}`)
	rows := n.waitRows("both proxies Ready", 30*time.Second, allPhase([]string{"pk", "pg"}, "Ready"))
	gone := rows["pg"].Address
	if !strings.HasPrefix(gone, "127.0.42.") || len(proxyProcs(t, dir)) != 2 {
		t.Fatalf("pg at %s, %d proxy processes", gone, len(proxyProcs(t, dir)))
	}

	// Restart with "gone" removed from the config.
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d", code)
	}
	writeProviders(t, cfg, 41, "keep")
	n.start()
	if keys := strings.Fields(n.nats("kv", "ls", "provider_catalog")); len(keys) != 1 || keys[0] != "keep" {
		t.Fatalf("provider_catalog holds %q, want only keep", keys)
	}
	rows = n.waitRows("pg Invalid", 30*time.Second, func(rows map[string]fleet.Row) bool {
		return rows["pg"].Phase == "Invalid" && rows["pg"].Reason == "ProviderRemoved"
	})
	msg := rows["pg"].Message
	if !strings.HasPrefix(msg, `provider: "gone" is no longer configured (known: keep)`) || !strings.Contains(msg, gone) ||
		!strings.Contains(msg, "left alone, unmanaged") || rows["pg"].Address != gone {
		t.Fatalf("pg: %+v", rows["pg"])
	}
	if table := n.egressd("status"); !strings.Contains(table, "pg: "+msg) {
		t.Fatalf("the table does not say why pg is Invalid:\n%s", table)
	}
	if ev := n.egressd("events", "-f=false", "--proxy", "pg", "--kind", "phase"); !strings.Contains(ev, "unmanaged") {
		t.Fatalf("no phase event says pg's instance is unmanaged:\n%s", ev)
	}
	if rows["pk"].Phase != "Ready" || len(proxyProcs(t, dir)) != 2 {
		t.Fatalf("pk %s; %d proxy processes (pg's must be left running)", rows["pk"].Phase, len(proxyProcs(t, dir)))
	}

	// Configured again: pg's instance is managed again, and a deletion removes it.
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d", code)
	}
	writeProviders(t, cfg, 41, "keep", "gone")
	n.start()
	n.waitRows("pg Ready again", 30*time.Second, func(rows map[string]fleet.Row) bool {
		return rows["pg"].Phase == "Ready" && rows["pg"].Address == gone
	})
	n.nats("kv", "del", "-f", "proxies", "pg")
	n.nats("kv", "del", "-f", "proxies", "pk")
	n.waitRows("every proxy deleted", 30*time.Second, func(rows map[string]fleet.Row) bool { return len(rows) == 0 })
	if procs := proxyProcs(t, dir); len(procs) != 0 {
		t.Fatalf("%d proxy processes left", len(procs))
	}
}

// `egressd setup` with a config that no longer declares a provider removes its catalog record
// (published by that provider's provisioners, which are gone) and says so; the others stay.
func TestSetupRemovesUndeclaredProviders(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "egressd.yaml")
	writeProviders(t, cfg, 43, "keep", "gone")
	ctx := context.Background()
	setup := func() string {
		t.Helper()
		r := runEgressd(t, dir, "", "setup", "--nats-url", srv.ClientURL(), "--config", cfg, "--data-dir", dir)
		if r.code != 0 {
			t.Fatalf("egressd setup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	setup()
	_, js := kvstoretest.Connect(t, srv)
	store, err := kvstore.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"keep", "gone"} { // what their provisioners publish
		if _, err := kvstore.PutJSON(ctx, store.Catalog, name, map[string]any{"v": 1, "provider": name}); err != nil {
			t.Fatal(err)
		}
	}
	writeProviders(t, cfg, 43, "keep")
	if out := setup(); !strings.Contains(out, "provider gone: removed from provider_catalog (no longer configured; its instances are left alone)") {
		t.Fatalf("setup did not say it removed gone:\n%s", out)
	}
	keys, err := store.Catalog.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "keep" {
		t.Fatalf("provider_catalog holds %q (%v), want only keep", keys, err)
	}
}
