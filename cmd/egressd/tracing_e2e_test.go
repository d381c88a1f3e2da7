package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// With OTLP export on and its collector down, egressd runs as usual: proxies come up and
// are leased, it stops at once on SIGTERM, and the failed exports cost one warning.
func TestRunWithTracingCollectorDown(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	collector := freeAddr(t) // reserved and closed: nothing listens there
	n := startNodeEnv(t, dir, []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + collector,
		"OTEL_SERVICE_NAME=egressd-e2e", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_EXPORTER_OTLP_TIMEOUT=500"},
		"--config", writeConfig(t, dir, 41))
	if !strings.Contains(n.logs(), `msg="tracing on"`) {
		t.Fatal("egressd did not turn tracing on")
	}
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"successThreshold":1}`
	n.nats("kv", "put", "proxies", "t1", `{"provider":"local",`+hc+`}`)
	n.waitRows("t1 Ready", 30*time.Second, allPhase([]string{"t1"}, events.PhaseReady))
	if r, raw := n.acquire(`{"ttlSeconds":30}`); r.Lease.Proxy != "t1" {
		t.Fatalf("acquire: %s", raw)
	}
	waitUntil(t, "an export to fail", 30*time.Second, func() (bool, string) {
		return strings.Contains(n.logs(), "spans could not be exported"), "no export failed yet"
	})
	if code := n.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	complaints := regexp.MustCompile(`(?m)^.*level=(WARN|ERROR).*component=tracing.*$`).FindAllString(n.logs(), -1)
	if len(complaints) != 1 {
		t.Fatalf("%d tracing warnings or errors, want 1:\n%s", len(complaints), strings.Join(complaints, "\n"))
	}
}

// With no OTEL_* variable set, no SDK is installed.
func TestRunWithoutTracing(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, "--config", writeConfig(t, dir, 42), "--roles", "reconciler,leaser")
	if code := n.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if strings.Contains(n.logs(), "component=tracing") {
		t.Fatalf("tracing set up with nothing configured:\n%s", n.logs())
	}
}
