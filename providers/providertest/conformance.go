package providertest

import (
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

// Sentinels the suite writes into every CreateRequest (user-data and auth password). No
// error and no Instance may ever contain them.
const (
	SentinelUserData = "SENTINEL-USERDATA-7f3a"
	SentinelPassword = "SENTINEL-PASSWORD-91bc"
)

// Harness tells the suite how to build a provider and a valid request for it.
type Harness struct {
	// New returns a fresh provider per subtest, cleaned up via t.Cleanup. Subtests run in
	// parallel unless Serial is set, so providers from two calls must not share instances.
	New func(t *testing.T) providers.Provider
	// Request returns a valid CreateRequest for that name and uid (Installation, Host,
	// Port... filled). The suite overwrites UserData and Auth.Password with its sentinels.
	Request func(t *testing.T, name, uid string) providers.CreateRequest
	// MalformedIDs are IDs the provider must reject as ErrPermanent, in addition to the
	// generic ones the suite always tries.
	MalformedIDs []string
	// Settle waits until Get reports the instance Running and returns it, for providers whose
	// Create returns before Running. Nil means Create returns a Running instance.
	Settle func(t *testing.T, p providers.Provider, id string) providers.Instance

	// Optional fields.

	// Reopen returns a new provider object over the same backend state as p. When set, the
	// suite proves marks and states are read back from the backend, not remembered.
	Reopen func(t *testing.T, p providers.Provider) providers.Provider
	// PlantUnmarked puts an instance without the managed mark into p's backend and returns
	// its name. When set, the suite checks List leaves it out.
	PlantUnmarked func(t *testing.T, p providers.Provider) string
	// DeleteWait is how long a deleted instance may take to disappear from Get and List, for
	// providers whose Delete returns early. Zero means Delete waits.
	DeleteWait time.Duration
	// Serial runs the subtests one after another, for backends that cannot be shared.
	Serial bool
}

// Run runs the conformance suite against the providers h builds, one subtest per rule.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Request == nil {
		t.Fatal("providertest: Harness.New and Harness.Request are required")
	}
	for _, c := range []struct {
		name string
		run  func(*env)
	}{
		{"CreateIsIdempotent", testCreateIsIdempotent},
		{"RunningHasAddress", testRunningHasAddress},
		{"MarksReadBack", testMarksReadBack},
		{"LifetimeMarkReadBack", testLifetimeMarkReadBack},
		{"DeleteIsIdempotent", testDeleteIsIdempotent},
		{"SuccessorBesideInstance", testSuccessorBesideInstance},
		{"MalformedIDIsPermanent", testMalformedIDIsPermanent},
		{"ListOnlyMarked", testListOnlyMarked},
		{"CancelledContextReturns", testCancelledContextReturns},
		{"ConcurrentCreateDeleteSameName", testConcurrentCreateDeleteSameName},
		{"ConcurrentCreatesDoNotCollide", testConcurrentCreatesDoNotCollide},
		{"ErrorsAreClassifiedAndRedacted", testErrorsAreClassifiedAndRedacted},
		{"Catalog", testCatalog},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !h.Serial {
				t.Parallel()
			}
			c.run(open(t, &h))
		})
	}
}
