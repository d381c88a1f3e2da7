package reconciler

import "github.com/egressd/egressd/events"

// sameVerdict says whether Decide would read two health records alike: the same address
// judged the same way, with the same error to show. Probers rewrite every record each
// interval (a new probe time, latency, counters), so at fleet size most health updates change
// nothing Decide looks at, and the leader need not decide again for them.
// TestSameVerdictCoversWhatDecideReads fails when Decide starts reading another field.
func sameVerdict(a, b *events.ProxyHealth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Address == b.Address && a.Healthy == b.Healthy && a.Judged() == b.Judged() && a.LastError == b.LastError
}
