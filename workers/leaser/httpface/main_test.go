package httpface

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: the face's server must end with
// its stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
