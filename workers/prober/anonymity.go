package prober

import (
	"net/netip"
	"net/textproto"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
)

// notAddressHeaders are never searched for the client's address: Host names the site (which
// may share the prober's address, an echo endpoint on the prober's own machine), and the
// credential headers arrive redacted.
var notAddressHeaders = []string{"Host", "Authorization", "Proxy-Authorization", "Cookie"}

// judge is what one echo reply says of the path it came through: the names of the headers
// that reveal a proxy (leakHeaders) or the client (any header carrying client, the prober's
// address as the proxy saw it), and the verdict: transparent when the client's address reached
// the site, anonymous when only a proxy is revealed, elite otherwise. Names only: values may
// carry credentials. An invalid client skips the address search (the named headers still
// count).
func (r EchoReply) judge(client netip.Addr) ([]string, events.Anonymity) {
	leaked := r.leaked()
	named := len(leaked) > 0
	var carrying []string
	if client.IsValid() {
		client = client.Unmap()
		for k, vs := range r.Headers {
			name := textproto.CanonicalMIMEHeaderKey(k)
			if slices.Contains(notAddressHeaders, name) {
				continue
			}
			if slices.ContainsFunc(vs, func(v string) bool { return mentions(v, client) }) {
				carrying = append(carrying, name)
			}
		}
	}
	slices.Sort(carrying)
	carrying = slices.Compact(carrying) // another echo service may send a name in two spellings
	for _, name := range carrying {
		if !slices.Contains(leaked, name) {
			leaked = append(leaked, name)
		}
	}
	switch {
	case len(carrying) > 0:
		return leaked, events.AnonymityTransparent
	case named:
		return leaked, events.AnonymityAnonymous
	}
	return leaked, events.AnonymityElite
}

// mentions reports whether a header value names addr as a whole token: "10.0.0.1" is in
// "for=10.0.0.1;proto=http", "10.0.0.1:5555" and `for="[::ffff:10.0.0.1]:80"`, but not in
// "10.0.0.12". Tokens are the runs of characters an address (with a port) is written in.
func mentions(value string, addr netip.Addr) bool {
	for tok := range strings.FieldsFuncSeq(value, func(c rune) bool {
		return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '.' || c == ':')
	}) {
		if a, err := netip.ParseAddr(tok); err == nil && a.Unmap() == addr {
			return true
		}
		if ap, err := netip.ParseAddrPort(tok); err == nil && ap.Addr().Unmap() == addr {
			return true
		}
	}
	return false
}

// verdict folds the paths of one probe into the record's verdict: Least over the paths that
// gave one, and the union of their leaked headers (in the paths' order). complete is false
// when a path that could have given a verdict failed this time (see nextHealth).
func verdict(paths []events.PathCheck) (a events.Anonymity, leaked []string, complete bool) {
	complete = true
	for _, pc := range paths {
		if pc.Anonymity == "" {
			if pc.Error != "" && pc.Error != errNotEcho && pc.Error != errNoForward {
				complete = false
			}
			continue
		}
		a = least(a, pc.Anonymity)
		for _, h := range pc.Leaked {
			if !slices.Contains(leaked, h) {
				leaked = append(leaked, h)
			}
		}
	}
	return a, leaked, complete
}

// least is events.Least with unknown as "no verdict yet" rather than as the lowest: the
// other side wins.
func least(a, b events.Anonymity) events.Anonymity {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return events.Least(a, b)
}
