package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
)

// TestLifecycleSurvivesLeaseFlood runs the real binary with a small lease stream cap (the
// `events:` config block) and leases until the lease stream has dropped several caps' worth
// of events, more than a single stream of that size would have held in all: `egressd events
// --kind phase` still prints every proxy's first phase change, and `--kind op` its op result.
func TestLifecycleSurvivesLeaseFlood(t *testing.T) {
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 46)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const leaseCap = kvstore.MinEventsMaxBytes
	b = append(b, fmt.Sprintf("events:\n  leases: {maxAge: 1h, maxBytes: %d}\n  lifecycle: {maxBytes: 1MiB}\n", leaseCap)...)
	if err := os.WriteFile(filepath.Join(dir, "egressd.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "--config", cfg)
	names := []string{"ev-1", "ev-2", "ev-3"}
	for _, p := range names {
		n.nats("kv", "put", "proxies", p, `{"provider":"local","attributes":{"flood":"yes"}}`)
	}
	n.waitRows("all Ready", 60*time.Second, allPhase(names, events.PhaseReady))

	nc, js := n.client()
	ls, err := js.Stream(t.Context(), events.StreamLeaseEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := ls.CachedInfo().Config; c.MaxBytes != leaseCap || c.MaxAge != time.Hour {
		t.Fatalf("lease stream limits %d/%s, want the config's %d/1h", c.MaxBytes, c.MaxAge, leaseCap)
	}
	cl := client.New(nc, client.WithRequestTimeout(5*time.Second))
	for i := 0; ; i++ {
		g, err := cl.AcquireOnce(t.Context(), client.AcquireOptions{Selector: map[string]string{"flood": "yes"},
			Target: fmt.Sprintf("site-%d.example", i%5), TTL: 30 * time.Second, Holder: "flood"})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if _, err := cl.Release(t.Context(), g.ID); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if i%50 != 49 {
			continue
		}
		info, err := ls.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// Dropped at least four times what is kept: the stream filled five times over.
		if info.State.FirstSeq > 4*info.State.Msgs && info.State.Msgs > 0 {
			t.Logf("after %d lease cycles the lease stream keeps %d events, %d bytes, from seq %d", i+1, info.State.Msgs, info.State.Bytes, info.State.FirstSeq)
			break
		}
	}
	first := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(n.egressd("events", "--kind", "phase", "-f=false", "--since", "1h", "--json")), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events --json line %q: %v", line, err)
		}
		if ev.Kind != events.KindPhase {
			t.Errorf("--kind phase printed a %s event", ev.Kind)
		}
		if ev.From == "" {
			first[ev.Proxy] = true // a proxy's first status has no previous phase
		}
	}
	ops := n.egressd("events", "--kind", "op", "-f=false", "--since", "1h")
	for _, p := range names {
		if !first[p] {
			t.Errorf("the first phase change of %s is gone after the lease flood", p)
		}
		if !strings.Contains(ops, p) {
			t.Errorf("no op result of %s after the lease flood:\n%s", p, ops)
		}
	}
	// The lease history that is kept is still there to read, and to count.
	if out := n.egressd("events", "--kind", "lease", "-f=false", "--since", "1h"); !strings.Contains(out, "released") {
		t.Errorf("events --kind lease shows no release:\n%.2000s", out)
	}
	counts, err := fleet.CountLeaseEvents(t.Context(), js, time.Now().Add(-time.Hour), time.Time{})
	if err != nil || len(counts) == 0 {
		t.Fatalf("lease counts: %v %v", counts, err)
	}
}
