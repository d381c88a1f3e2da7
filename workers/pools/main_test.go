package pools

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests (see workers/main_test.go).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
