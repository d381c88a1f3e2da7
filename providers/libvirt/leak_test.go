package libvirt

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine may outlive the tests: every one the package starts has an owner that ends it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
