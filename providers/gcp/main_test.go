package gcp

import (
	"testing"

	"go.uber.org/goleak"
)

// Every simulator transition, forward proxy and SDK client must be gone after the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
