package leaser

import (
	"net"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
)

// minLevels are the minAnonymity values an acquire may ask for; each has an ordered set of
// the eligible proxies that meet it in every selector's set (selSet.orders).
var minLevels = [...]events.Anonymity{events.AnonymityAnonymous, events.AnonymityElite}

// levels counts the verdicts a set tallies its Ready members by: unknown and each verdict.
const levels = 1 + 3

// level is the index of a verdict in selSet.readyBy: 0 unknown, then events.Anonymities'.
func level(a events.Anonymity) int {
	for i, v := range events.Anonymities {
		if a == v {
			return i + 1
		}
	}
	return 0
}

// anonymity is the probers' verdict on the proxy's current instance (events.AnonymityVerdict:
// a record about another address, or a predecessor's at this one, is unknown). Callers hold mu.
func (p *proxyView) anonymity() events.Anonymity {
	if p.ip == "" || p.port <= 0 {
		return ""
	}
	// Staleness is left to the record's TTL, as for the phase the reconciler derives.
	return p.health.AnonymityVerdict(net.JoinHostPort(p.ip, strconv.Itoa(p.port)), p.addressAt, 0, time.Time{})
}

// order is the ordered set an acquire with minAnonymity min reads in order o.
func (s *selSet) order(o int, min events.Anonymity) *ranked {
	for i, m := range minLevels {
		if m == min {
			return &s.orders[o][1+i]
		}
	}
	return &s.orders[o][0]
}

// belowAnonymity counts the Ready members less anonymous than min, unknown included.
func (s *selSet) belowAnonymity(min events.Anonymity) int {
	if min == "" {
		return 0
	}
	n := s.readyBy[0]
	for i, a := range events.Anonymities {
		if !a.AtLeast(min) {
			n += s.readyBy[i+1]
		}
	}
	return n
}
