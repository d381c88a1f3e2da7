package local

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// A master rotation reaches a running lease-mode proxy through the provider: LeaseKeys says
// which masters its keys derive from; WriteLeaseKeys with two masters has it pass tokens of
// both, and with the new one only, refuse the old one's (ErrKeyID); no restart. Instances with
// a password are not listed.
func TestWriteLeaseKeysReachesRunningProxies(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	old, next := leaseauth.NewMaster(), leaseauth.NewMaster()
	req := request("egress-keys", freePort(t))
	req.Auth = &providers.Auth{LeaseKey: providers.Secret(old.InstanceKey("p-keys", "g1").FileLine())}
	inst := mustCreate(t, p, req)
	pw := request("egress-pw", freePort(t))
	pw.Auth = &providers.Auth{Username: "u", Password: "secret"}
	mustCreate(t, p, pw)
	before := proxies(p, req.Name)
	srv := upstream(t)
	exp := time.Now().Add(time.Minute)
	byOld := url.UserPassword(old.InstanceKey("p-keys", "g1").Sign("p-keys.0.00000000000000aa", exp))
	byNext := url.UserPassword(next.InstanceKey("p-keys", "g1").Sign("p-keys.1.00000000000000bb", exp))

	held := func() string {
		t.Helper()
		sets, err := p.LeaseKeys(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := sets[pw.Name]; ok || len(sets) != 1 {
			t.Fatalf("lease key sets of %d instances, want only %s's", len(sets), req.Name)
		}
		s := sets[req.Name]
		if s.Proxy() != "p-keys" || s.Instance() != "g1" {
			t.Fatalf("proxy %q instance %q", s.Proxy(), s.Instance())
		}
		return strings.Join(s.IDs(), ",")
	}
	if got := held(); got != old.ID() {
		t.Fatalf("held %s, want %s", got, old.ID())
	}
	if status, _ := through(t, inst, byNext, srv.URL); status != 407 {
		t.Fatalf("a token of a master not yet delivered: %d", status)
	}
	for _, c := range []struct {
		name              string
		masters           []leaseauth.Master
		oldWant, nextWant int
	}{
		{"spreading", []leaseauth.Master{old, next}, 200, 200},
		{"retired", []leaseauth.Master{next}, 407, 200},
	} {
		var keys []leaseauth.Key
		var ids []string
		for _, m := range c.masters {
			keys = append(keys, m.InstanceKey("p-keys", "g1"))
			ids = append(ids, m.ID())
		}
		set, err := leaseauth.NewKeySet(keys...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WriteLeaseKeys(ctxT(t), req.Name, set); err != nil {
			t.Fatal(err)
		}
		if got := held(); got != strings.Join(ids, ",") {
			t.Errorf("%s: held %s, want %s", c.name, got, strings.Join(ids, ","))
		}
		if status, _ := through(t, inst, byOld, srv.URL); status != c.oldWant {
			t.Errorf("%s: the old master's token: %d, want %d", c.name, status, c.oldWant)
		}
		if status, _ := through(t, inst, byNext, srv.URL); status != c.nextWant {
			t.Errorf("%s: the next master's token: %d, want %d", c.name, status, c.nextWant)
		}
	}
	if after := proxies(p, req.Name); len(after) != 1 || after[0] != before[0] {
		t.Errorf("delivering keys restarted the proxy: %v → %v", before, after)
	}
	if err := p.WriteLeaseKeys(ctxT(t), "egress-gone", leaseauth.KeySet{}); err == nil {
		t.Error("keys written for an instance that does not exist")
	}
}
