package selection

import (
	"testing"

	"github.com/egressd/egressd/events"
)

func TestNeighbourhoodKey(t *testing.T) {
	p := func(ip, egress, provider, host string, external bool) *proxyView {
		v := &proxyView{ip: ip, port: 3128, provider: provider, host: host, external: external}
		if egress != "" { // a probe of this address saw egress
			v.health = events.ProxyHealth{Address: ip + ":3128", EgressIP: egress}
		}
		return v
	}
	for _, c := range []struct {
		name string
		n    Neighbourhood
		p    *proxyView
		want string
	}{
		{"ipv4 /24 of the address", Neighbourhood{V4Bits: 24}, p("127.0.5.10", "", "local", "h", false), "127.0.5.0/24"},
		{"the observed egress first", Neighbourhood{V4Bits: 24}, p("10.0.0.5", "203.0.113.77", "gcp", "proj", false), "203.0.113.0/24"},
		{"ipv6 /64", Neighbourhood{V6Bits: 64}, p("2001:db8:1:2::10", "", "local", "h", false), "2001:db8:1:2::/64"},
		{"ipv6 without a v6 prefix", Neighbourhood{V4Bits: 24}, p("2001:db8::1", "", "local", "h", false), ""},
		{"ipv4-mapped", Neighbourhood{V4Bits: 16}, p("::ffff:192.0.2.9", "", "local", "h", false), "192.0.0.0/16"},
		{"by provider target", Neighbourhood{ByTarget: true}, p("127.0.5.10", "", "proxmox", "pve1", false), "target:proxmox/pve1"},
		{"external has no target", Neighbourhood{ByTarget: true}, p("198.51.100.1", "", "", "", true), ""},
		{"no address", Neighbourhood{V4Bits: 24}, p("", "", "local", "h", false), ""},
	} {
		if got := c.n.key(c.p); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
