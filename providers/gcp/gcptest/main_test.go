package gcptest

import (
	"testing"

	"go.uber.org/goleak"
)

// Every transition and forward proxy must be gone after Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
