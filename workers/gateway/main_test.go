package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: the gateway's server, its lease
// pool's reaper, the leases' renewals and every tunnel have an owner that stops them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
