package events

import (
	"net/netip"
	"time"
)

// AnonymityVerdict is the one judgement of what a proxy reveals, for every reader: the
// reconciler's HeaderLeak, the leaser's minAnonymity, the read model's ANONYMITY and
// egress_proxies_anonymity. It is the record's Anonymity when the record is About the
// proxy's instance at address since since, else unknown (""): a predecessor's verdict at
// the same ip:port says nothing about what this instance reveals. As with Verdict, a known
// probe interval (> 0) makes a record whose last probe is older than
// ProbeOverdueAfter(interval) unknown too; 0 leaves staleness to the record's TTL.
func (h *ProxyHealth) AnonymityVerdict(address string, since time.Time, interval time.Duration, now time.Time) Anonymity {
	if !h.About(address, since) {
		return ""
	}
	if interval > 0 && now.Sub(h.LastProbeAt) > ProbeOverdueAfter(interval) {
		return ""
	}
	return h.Anonymity
}

// Echoed reports whether the probers tried to judge anonymity: the record lists the paths
// they probed. A record without paths is from before the probers judged anonymity (or not
// yet about it); one with paths but no verdict had a path that failed, or a check URL that is
// not an echo endpoint, and its unknown is final, not pending.
func (h *ProxyHealth) Echoed() bool {
	return h != nil && (h.Anonymity != "" || len(h.Paths) > 0)
}

// EgressMismatch reports whether the record's observed egress address differs from the one
// expected, compared as addresses (an IPv4-mapped IPv6 form equals the IPv4 one). Without
// either address nothing is compared.
func (h *ProxyHealth) EgressMismatch() bool {
	if h == nil || h.ExpectedEgress == "" || h.EgressIP == "" {
		return false
	}
	got, err1 := netip.ParseAddr(h.EgressIP)
	want, err2 := netip.ParseAddr(h.ExpectedEgress)
	if err1 != nil || err2 != nil {
		return h.EgressIP != h.ExpectedEgress
	}
	return got.Unmap() != want.Unmap()
}
