package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The revocation metrics: revocations written by result, the list size per provider, and the
// refusal counts read from each provider that keeps them at scrape time, lint-clean.
func TestRevocationMetrics(t *testing.T) {
	_, m := seed(t)
	m.ObserveRevocation("ok")
	m.ObserveRevocation("ok")
	m.ObserveRevocation("error")
	m.ObserveRevocationList("local", 7)
	counts := map[string]int64{"revoked": 3, "expired": 1}
	m.RegisterRefusals("local", func() (map[string]int64, error) { return counts, nil })
	m.RegisterRefusals("local-2", func() (map[string]int64, error) { return map[string]int64{"instance": 2}, nil })
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP egress_lease_revocations_total Lease revocations this process's leaser wrote (ok) or failed to write (error).
# TYPE egress_lease_revocations_total counter
egress_lease_revocations_total{result="error"} 1
egress_lease_revocations_total{result="ok"} 2
# HELP egress_lease_revocation_list_entries Entries of the lease revocation list this process last delivered to a provider's proxies.
# TYPE egress_lease_revocation_list_entries gauge
egress_lease_revocation_list_entries{provider="local"} 7
# HELP egress_lease_tokens_refused_total Credentials the provider's proxies refused since each started, by reason: revoked, expired, instance, key, signature, malformed, credentials.
# TYPE egress_lease_tokens_refused_total counter
egress_lease_tokens_refused_total{provider="local",reason="expired"} 1
egress_lease_tokens_refused_total{provider="local",reason="revoked"} 3
egress_lease_tokens_refused_total{provider="local-2",reason="instance"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_lease_revocations_total",
		"egress_lease_revocation_list_entries", "egress_lease_tokens_refused_total"); err != nil {
		t.Fatal(err)
	}
}
