package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A role that fails to start after another part has started (here the prober's echo
// listener, after the metrics server) ends run with the error, and nothing run started is
// left running: every return path cancels and waits. (The metrics server is the part that
// would stay: nothing else ends it, while a role on the NATS connection ends once that closes.)
func TestRunFailingToStartLeavesNothingRunning(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	before := goleak.IgnoreCurrent()
	f := runFlags{dataDir: t.TempDir(), natsListen: "127.0.0.1:-1", roles: "prober", logLevel: "info",
		leaderTTL: 2 * time.Second, echoListen: busy.Addr().String(), probeConc: 1, metrics: "127.0.0.1:0"}
	err = run(t.Context(), f, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "--echo-listen") {
		t.Fatalf("run = %v, want the --echo-listen error", err)
	}
	goleak.VerifyNone(t, before)
}
