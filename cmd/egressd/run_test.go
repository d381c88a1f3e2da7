package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A role that fails to start after another part has started (here the prober, refusing its
// filter, after the metrics server and the echo endpoint) ends run with the error, and nothing run started is
// left running: every return path cancels and waits. (The metrics server is the part that
// would stay: nothing else ends it, while a role on the NATS connection ends once that closes.)
func TestRunFailingToStartLeavesNothingRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	f := runFlags{dataDir: t.TempDir(), natsListen: "127.0.0.1:-1", roles: "prober", logLevel: "info",
		leaderTTL: 2 * time.Second, echoListen: "127.0.0.1:0", probeConc: 1, metrics: "127.0.0.1:0", probe: "local.*"}
	err := run(t.Context(), f, discardLogger())
	if err == nil || !strings.Contains(err.Error(), `probe filter "local.*"`) {
		t.Fatalf("run = %v, want the prober's filter error", err)
	}
	goleak.VerifyNone(t, before)
}
