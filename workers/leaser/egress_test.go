package leaser_test

import (
	"context"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// A grant names its credentials as fields beside the URL (for browsers' proxy settings) and
// says where the proxy's traffic leaves from: the address its last probe saw (or, before any
// probe of the current address, the one expected), its provider, target, placement, pool and
// attributes. A probe of another address (the instance's predecessor) is not taken for it.
func TestGrantSaysCredentialsAndEgress(t *testing.T) {
	r := newRig(t, nil)
	attrs := map[string]string{"geo": "de", "tier": "dc"}
	r.seed(proxy{name: "px-eg", maxLeases: 4, attrs: attrs, pool: "web", auth: &[2]string{"u-1", "p:w@d"}},
		proxy{name: "px-open", maxLeases: 4, attrs: map[string]string{"geo": "fr"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := map[string]any{"provider": "local", "maxLeases": 4, "attributes": attrs, "pool": "web",
		"auth": map[string]string{"username": "u-1", "password": "p:w@d"}, "placement": map[string]string{"region": "eu", "zone": "eu-b"}}
	if _, err := kvstore.PutJSON(ctx, r.store.Proxies, "px-eg", spec); err != nil {
		t.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "h1",
		IP: "127.0.0.10", Port: 3128, ExpectedEgress: "127.0.0.10"}
	if _, err := kvstore.PutJSON(ctx, r.store.Status, "px-eg", st); err != nil {
		t.Fatal(err)
	}
	// A probe of another address (the instance's predecessor) says nothing of this instance.
	h := events.ProxyHealth{V: 1, Proxy: "px-eg", Healthy: true, Address: "127.0.0.99:3128", EgressIP: "198.51.100.1"}
	if _, err := kvstore.PutJSON(ctx, r.store.Health, "px-eg", h); err != nil {
		t.Fatal(err)
	}
	r.startLeasers(1)

	want := events.LeaseEgress{Address: "127.0.0.10", Provider: "local", Target: "h1", Region: "eu", Zone: "eu-b", Pool: "web", Attributes: attrs}
	check := func(what string, first bool, want events.LeaseEgress) {
		t.Helper()
		var g events.LeaseGrant
		same := func() bool {
			g = r.mustAcquire(events.AcquireRequest{Holder: "c1", Selector: map[string]string{"geo": "de"}, TTLSeconds: 60})
			r.release(g.ID)
			if g.Egress == nil {
				return false
			}
			got := *g.Egress
			return got.Address == want.Address && got.Observed == want.Observed && got.Provider == want.Provider &&
				got.Target == want.Target && got.Region == want.Region && got.Zone == want.Zone && got.Pool == want.Pool &&
				maps.Equal(got.Attributes, want.Attributes)
		}
		if first {
			if !same() {
				t.Fatalf("%s: egress %+v, want %+v", what, g.Egress, want)
			}
		} else {
			eventually(t, 10*time.Second, what, same)
		}
		u, err := url.Parse(g.URL)
		if err != nil || u.User == nil {
			t.Fatalf("grant URL: %v", err)
		}
		pass, _ := u.User.Password()
		if g.Username != "u-1" || g.Password != "p:w@d" || u.User.Username() != g.Username || pass != g.Password {
			t.Fatalf("fields user %q pass %q, URL user %q pass %q: want u-1 and p:w@d in both", g.Username, g.Password, u.User.Username(), pass)
		}
	}
	check("the expected egress, the only probe being of another address", true, want)

	h.Address, h.EgressIP = "127.0.0.10:3128", "198.51.100.7"
	if _, err := kvstore.PutJSON(ctx, r.store.Health, "px-eg", h); err != nil {
		t.Fatal(err)
	}
	want.Address, want.Observed = "198.51.100.7", true
	check("the probed egress", false, want)

	// Without auth, no credential fields.
	g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Selector: map[string]string{"geo": "fr"}, TTLSeconds: 60})
	if g.Username != "" || g.Password != "" || g.Egress == nil || g.Egress.Provider != "local" {
		t.Fatalf("open proxy grant: user %q pass %q egress %+v", g.Username, g.Password, g.Egress)
	}
}
