package reconciler

import (
	"slices"

	"github.com/egressd/egressd/events"
)

// sameVerdict says whether Decide would read two health records alike: the same address
// judged the same way, with the same error to show, the same anonymity (verdict, leaked
// headers, what each path showed) and the same egress addresses. Probers rewrite every record each
// interval (a new probe time, latency, counters), so at fleet size most health updates change
// nothing Decide looks at, and the leader need not decide again for them.
// TestSameVerdictCoversWhatDecideReads fails when Decide starts reading another field.
func sameVerdict(a, b *events.ProxyHealth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Address == b.Address && a.Healthy == b.Healthy && a.Judged() == b.Judged() && a.LastError == b.LastError &&
		a.Anonymity == b.Anonymity && slices.Equal(a.LeakedHeaders, b.LeakedHeaders) && slices.EqualFunc(a.Paths, b.Paths, samePath) &&
		a.EgressIP == b.EgressIP && a.ExpectedEgress == b.ExpectedEgress && a.LastTransitionAt.Equal(b.LastTransitionAt)
}

func samePath(a, b events.PathCheck) bool {
	return a.Path == b.Path && a.EgressIP == b.EgressIP && slices.Equal(a.Leaked, b.Leaked) && a.Anonymity == b.Anonymity && a.Error == b.Error
}
