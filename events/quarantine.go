package events

import (
	"net/netip"
	"strings"
	"time"
)

// BucketQuarantine holds the addresses in quarantine (docs/pools.md#quarantine, decision 96):
// one Quarantine per burned egress address, under QuarantineKey, each with a per-key TTL that
// ends a little after its Until, so that quarantine survives restarts and fades by itself.
// The pool controller writes it; provisioners read it into each create (the local provider
// hands out none of it); readers show it.
const BucketQuarantine = "address_quarantine"

// Reasons of quarantine (pool events, and a member's Retire).
const (
	// ReasonAddressQuarantined: a burned member's egress address went into quarantine.
	ReasonAddressQuarantined Reason = "AddressQuarantined"
	// ReasonQuarantined: a member that replaced a burned one still leaves from a quarantined
	// address (or its neighbourhood); it is replaced again, successor first.
	ReasonQuarantined Reason = "Quarantined"
	// ReasonQuarantineKept: such a member was kept, since recycle.quarantine.maxReplacements
	// replacements in a row gave no address out of quarantine.
	ReasonQuarantineKept Reason = "QuarantineKept"
)

// Quarantine is one address in quarantine.
type Quarantine struct {
	V int `json:"v"`
	// Address is the egress address sites saw from the burned member (its last probe's,
	// else its expected egress, else its own address).
	Address string `json:"address"`
	// Prefix is the neighbourhood quarantined with it (Address/32 or /128: the address alone).
	Prefix string `json:"prefix"`
	// Instance is the burned member's own address when it is not Address (its traffic left
	// from elsewhere: a NAT, a local proxy without bindSource): kept from new instances too,
	// the address alone, so a provider never hands the burned instance's address back.
	Instance string    `json:"instance,omitempty"`
	Pool     string    `json:"pool"`
	Proxy    string    `json:"proxy"`  // the burned member
	Reason   Reason    `json:"reason"` // Burned
	At       time.Time `json:"at"`
	Until    time.Time `json:"until"`
}

// QuarantineKey is an address's key in BucketQuarantine: the address, with an IPv6
// address's colons as underscores (a key may not hold a colon).
func QuarantineKey(addr string) string { return strings.ReplaceAll(addr, ":", "_") }

// Avoid is what q keeps from new instances: its prefix, and its instance's own address.
func (q Quarantine) Avoid() []netip.Prefix {
	var out []netip.Prefix
	if p, err := netip.ParsePrefix(q.Prefix); err == nil {
		out = append(out, p.Masked())
	}
	if a, err := netip.ParseAddr(q.Instance); err == nil {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// Live says whether q still holds at now.
func (q Quarantine) Live(now time.Time) bool { return now.Before(q.Until) }

// Holds reports whether addr is in q's neighbourhood; an address or a prefix that does not
// parse holds nothing.
func (q Quarantine) Holds(addr string) bool {
	p, err := netip.ParsePrefix(q.Prefix)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(addr)
	return err == nil && p.Contains(a.Unmap())
}

// AddressPrefix is the neighbourhood of addr: its prefix of v4Bits (IPv4) or v6Bits (IPv6)
// bits, masked. ok is false for an address that does not parse or a length of 0 or out of
// range for its family (then it has no neighbourhood). It is the one definition of an
// address neighbourhood: the leasers' neighbour cooldowns and the pools' quarantine use it.
func AddressPrefix(addr string, v4Bits, v6Bits int) (netip.Prefix, bool) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	bits := v6Bits
	if a.Is4() {
		bits = v4Bits
	}
	if bits <= 0 || bits > a.BitLen() {
		return netip.Prefix{}, false
	}
	p, err := a.Prefix(bits)
	return p, err == nil
}
