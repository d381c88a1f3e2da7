package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
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

// With a collector listening, the spans of a proxy's provisioning and of a lease reach it over
// OTLP/HTTP under the configured service name, and no request body carries the proxy's
// password.
func TestRunExportsTracesOverOTLP(t *testing.T) {
	needNats(t)
	const secret = "SENTINEL-otlp-5d21"
	var mu sync.Mutex
	names := map[string]bool{}
	services := map[string]bool{}
	leaked := false
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		leaked = leaked || bytes.Contains(body, []byte(secret))
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name] = true
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNodeEnv(t, dir, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_SERVICE_NAME=edge-e2e",
		"OTEL_BSP_SCHEDULE_DELAY=100"}, "--config", writeConfig(t, dir, 43))
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"successThreshold":1}`
	n.nats("kv", "put", "proxies", "o1", `{"provider":"local","auth":{"username":"u","password":"`+secret+`"},`+hc+`}`)
	n.waitRows("o1 Ready", 30*time.Second, allPhase([]string{"o1"}, events.PhaseReady))
	if r, raw := n.acquire(`{"ttlSeconds":30}`); r.Lease.Proxy != "o1" {
		t.Fatalf("acquire: %s", raw)
	}
	want := []string{"decide", "publish " + events.OpSubjectTemplate, "process " + events.OpSubjectTemplate,
		"provider create", "process " + events.OpResultSubjectTemplate, "process " + events.LeaseAcquireSubject,
		"create " + events.BucketLeases}
	waitUntil(t, "the spans at the collector", 30*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for _, w := range want {
			if !names[w] {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0, "missing " + strings.Join(missing, ", ")
	})
	if code := n.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if leaked {
		t.Error("an export carried the proxy's password")
	}
	if len(services) != 1 || !services["edge-e2e"] {
		t.Errorf("service names %v, want only edge-e2e", services)
	}
}
