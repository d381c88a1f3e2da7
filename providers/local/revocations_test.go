package local

import (
	"net/url"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// The revocation list the provider is handed reaches its running lease-mode proxies: a
// revoked lease's token is refused from then on, another lease's passes, and the proxy was
// not restarted for it.
func TestWriteRevocationsReachesRunningProxies(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	req := request("egress-rev", freePort(t))
	key := leaseauth.NewMaster().InstanceKey("p-rev", "g1")
	req.Auth = &providers.Auth{LeaseKey: providers.Secret(key.FileLine())}
	inst := mustCreate(t, p, req)
	before := proxies(p, req.Name)
	srv := upstream(t)
	exp := time.Now().Add(time.Minute)
	revoked := url.UserPassword(key.Sign("p-rev.0.00000000000000aa", exp))
	held := url.UserPassword(key.Sign("p-rev.1.00000000000000bb", exp))
	if status, _ := through(t, inst, revoked, srv.URL); status != 200 {
		t.Fatalf("before any list: %d", status)
	}
	var list leaseauth.Revocations
	list.Add("p-rev.0.00000000000000aa", exp.Add(leaseauth.Skew))
	if err := p.WriteRevocations(ctxT(t), &list); err != nil {
		t.Fatal(err)
	}
	if status, _ := through(t, inst, revoked, srv.URL); status != 407 {
		t.Errorf("a revoked lease's token: %d, want 407", status)
	}
	if status, _ := through(t, inst, held, srv.URL); status != 200 {
		t.Errorf("another lease's token: %d, want 200", status)
	}
	if after := proxies(p, req.Name); len(after) != 1 || after[0] != before[0] {
		t.Errorf("delivering the list restarted the proxy: %v → %v", before, after)
	}
	// The proxy counts what it refused, by reason, and the provider sums the counts.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := p.LeaseRefusals()
		if err != nil {
			t.Fatal(err)
		}
		if got["revoked"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals counted: %v, want revoked ≥ 1", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
