package selection

import (
	"slices"

	"github.com/egressd/egressd/events"
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
	pfx, ok := events.AddressPrefix(e, n.V4Bits, n.V6Bits)
	if !ok {
		return ""
	}
	return pfx.String()
}

// Neighbours are the other proxies in proxy's neighbourhood (SetNeighbourhood), by name, at
// most limit of them, and the neighbourhood's name ("" and none when proxy has none).
func (f *Fleet) Neighbours(proxy string, limit int) (string, []string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.proxies[proxy]
	if p == nil || p.hood == "" {
		return "", nil
	}
	var out []string
	for q := range f.hoods[p.hood] {
		if q != p && q.hasSpec && q.hasStatus {
			out = append(out, q.name)
		}
	}
	slices.Sort(out)
	return p.hood, out[:min(len(out), limit)]
}

// holderTarget keys the proxies where a holder holds leases for a target.
type holderTarget struct{ holder, target string }

// SetNeighbourhood sets the neighbourhood the fleet indexes its proxies by (before any entry
// is applied: proxies already known are indexed at their next change).
func (f *Fleet) SetNeighbourhood(n Neighbourhood) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hood = n
}

// rehood moves p to neighbourhood k ("" for none). Callers hold mu for writing.
func (f *Fleet) rehood(p *proxyView, k string) {
	if k == p.hood {
		return
	}
	if m := f.hoods[p.hood]; m != nil {
		delete(m, p)
		if len(m) == 0 {
			delete(f.hoods, p.hood)
		}
	}
	p.hood = k
	if k == "" {
		return
	}
	m := f.hoods[k]
	if m == nil {
		m = map[*proxyView]struct{}{}
		f.hoods[k] = m
	}
	m[p] = struct{}{}
}

// noteHeld counts (d = 1) or uncounts (-1) lease l on p for its holder and target, when the
// fleet spreads by neighbourhood. Callers hold mu for writing.
func (f *Fleet) noteHeld(p *proxyView, l events.Lease, d int) {
	if !f.hood.On() || l.Holder == "" || l.Target == "" {
		return
	}
	k := holderTarget{l.Holder, l.Target}
	m := f.held[k]
	if m == nil {
		m = map[*proxyView]int{}
		f.held[k] = m
	}
	if m[p] += d; m[p] <= 0 {
		delete(m, p)
	}
	if len(m) == 0 {
		delete(f.held, k)
	}
}

// Crowded are the neighbourhoods where holder holds a lease for target, for Query.Avoid. It
// costs the holder's leases for the target; empty unless the fleet has a neighbourhood set
// (SetNeighbourhood).
func (f *Fleet) Crowded(holder, target string) map[string]bool {
	out := map[string]bool{}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for p := range f.held[holderTarget{holder, target}] {
		if p.hood != "" {
			out[p.hood] = true
		}
	}
	return out
}
