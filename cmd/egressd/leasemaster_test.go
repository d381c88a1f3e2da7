package main

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
)

// A rotation switches only once every lease-mode proxy's current instance holds the next
// master, as its provider reports: a report of another instance, a provider that reports
// nothing, or a report without the next master each keep it waiting, and say why.
func TestLeaseMasterSpread(t *testing.T) {
	cur, next := leaseauth.NewMaster(), leaseauth.NewMaster()
	spreading, err := leaseauth.Ring{Current: cur}.Begin(next, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	both := []string{cur.ID(), next.ID()}
	report := func(gen string, ids ...string) map[string]events.LeaseKeysReport {
		return map[string]events.LeaseKeysReport{"local": {Provider: "local", Proxies: []events.ProxyLeaseKeys{{Proxy: "a", Generation: gen, KeyIDs: ids}}}}
	}
	a := []leaseProxy{{Name: "a", Provider: "local", Generation: "g1"}}
	for _, c := range []struct {
		name    string
		ring    leaseauth.Ring
		proxies []leaseProxy
		reports map[string]events.LeaseKeysReport
		waiting string
		why     string
	}{
		{"spread", spreading, a, report("g1", both...), "", ""},
		{"not delivered", spreading, a, report("g1", cur.ID()), "a", "not delivered"},
		{"another instance", spreading, a, report("g0", both...), "a", "not reported this instance"},
		{"no report", spreading, a, nil, "a", "cannot deliver keys"},
		{"other provider", spreading, []leaseProxy{{Name: "a", Provider: "gcp", Generation: "g1"}}, report("g1", both...), "a", "cannot deliver keys"},
		{"no proxies", spreading, nil, nil, "", ""},
		{"steady waits for nothing", leaseauth.Ring{Current: cur}, a, report("g1", cur.ID()), "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stateOf(c.ring, c.proxies, c.reports)
			if strings.Join(st.Waiting, ",") != c.waiting {
				t.Errorf("waiting for %v, want %q", st.Waiting, c.waiting)
			}
			if c.why != "" && (len(st.Proxies) == 0 || !strings.Contains(st.Proxies[0].Why, c.why)) {
				t.Errorf("why %q, want it to say %q", st.Proxies[0].Why, c.why)
			}
		})
	}
}
