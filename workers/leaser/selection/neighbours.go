package selection

import (
	"net/netip"
	"slices"
)

// Neighbourhood says which proxies a site is likely to see as one: those whose egress
// addresses share an IPv4 prefix of V4Bits or an IPv6 prefix of V6Bits (0: addresses of that
// family are nobody's neighbours), or, with ByTarget, those on the same provider target
// (host, project, node) whatever their addresses.
type Neighbourhood struct {
	V4Bits, V6Bits int
	ByTarget       bool
}

// On says whether any neighbourhood is configured.
func (n Neighbourhood) On() bool { return n.V4Bits > 0 || n.V6Bits > 0 || n.ByTarget }

// key is the neighbourhood p belongs to ("" for none): its egress prefix, or its provider
// target. The egress is the address sites see (the last probe's), else the expected one,
// else the proxy's own address.
func (n Neighbourhood) key(p *proxyView) string {
	if n.ByTarget {
		if p.provider == "" || p.host == "" || p.external {
			return ""
		}
		return "target:" + p.provider + "/" + p.host
	}
	e := p.endpoint().Egress.Address
	if e == "" {
		e = p.ip
	}
	a, err := netip.ParseAddr(e)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	bits := n.V6Bits
	if a.Is4() {
		bits = n.V4Bits
	}
	if bits <= 0 || bits > a.BitLen() {
		return ""
	}
	pfx, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return pfx.String()
}

// Neighbours are the other proxies in proxy's neighbourhood, by name, at most limit of them,
// and the neighbourhood's name ("" and none when proxy has none).
func (f *Fleet) Neighbours(proxy string, n Neighbourhood, limit int) (string, []string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil || !n.On() {
		return "", nil
	}
	k := n.key(p)
	if k == "" {
		return "", nil
	}
	var out []string
	for name, q := range f.proxies {
		if name != proxy && q.hasSpec && q.hasStatus && n.key(q) == k {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return k, out[:min(len(out), limit)]
}
