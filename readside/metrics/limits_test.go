package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet/fleettest"
	"github.com/egressd/egressd/readside/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The proxies a guard rail holds back are counted by provider and reason, every reason of a
// provider that has proxies at 0 when none waits on it.
func TestLimitWaitingMetrics(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	st, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, reason := range map[string]events.Reason{"a": events.ReasonLimitReached, "b": events.ReasonLimitReached,
		"c": events.ReasonRateLimited, "d": ""} {
		fleettest.Put(t, st.Proxies, name, []byte(`{"provider":"kvm"}`))
		fleettest.Put(t, st.Status, name, events.ProxyStatus{V: 1, Phase: events.PhasePending, Mode: "managed", Provider: "kvm",
			Reason: reason, CreatedAt: now, UpdatedAt: now})
	}
	m := metrics.New(st, nc, true)
	want := `
# HELP egress_limit_waiting_proxies Proxies whose create a guard rail holds back, by provider and reason: LimitReached (maxInstances), RateLimited (maxCreatesPerMinute), ProviderUnhealthy (a failing target).
# TYPE egress_limit_waiting_proxies gauge
egress_limit_waiting_proxies{provider="kvm",reason="LimitReached"} 2
egress_limit_waiting_proxies{provider="kvm",reason="ProviderUnhealthy"} 0
egress_limit_waiting_proxies{provider="kvm",reason="RateLimited"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "egress_limit_waiting_proxies"); err != nil {
		t.Error(err)
	}
}
