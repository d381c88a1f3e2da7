package statuspage

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: whatever a test starts must have
// an owner that stops it and waits. Nothing is ignored: kvstoretest's cleanups shut the
// embedded nats-server down and wait for it (WaitForShutdown) and close every client, which
// leaves none of their goroutines behind, with or without -race.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
