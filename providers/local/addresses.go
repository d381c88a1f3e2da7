package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// pool expands Addresses into the ordered list of addresses instances may take.
func (c Config) pool() ([]netip.Addr, error) {
	entries := c.Addresses
	if len(entries) == 0 {
		entries = []string{DefaultAddresses}
	}
	var pool []netip.Addr
	seen := map[netip.Addr]bool{}
	for i, e := range entries {
		// The key and the entry as written: with dozens of entries, an index alone is hard
		// to find.
		field := fmt.Sprintf("addresses[%d] %q", i, e)
		s, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		// Counted before anything is expanded, so that 10.0.0.0/8 fails at once.
		if n, ok := s.size(); !ok || n > uint64(maxPoolSize-len(pool)) {
			what := "more than 2^64"
			if ok {
				what = strconv.FormatUint(n, 10)
			}
			return nil, fmt.Errorf("%s: %w: this entry holds %s and the entries before it %d; a pool holds at most %d",
				field, errPoolTooBig, what, len(pool), maxPoolSize)
		}
		for a := s.first; ; a = a.Next() {
			if seen[a] {
				return nil, fmt.Errorf("%s: %s is already in the pool", field, a)
			}
			seen[a] = true
			pool = append(pool, a)
			if a == s.last {
				break
			}
		}
	}
	return pool, nil
}

// errPoolTooBig: a pool is held in memory and scanned on every allocation, so it is capped
// at maxPoolSize; more proxies than that on one host want several local providers.
var errPoolTooBig = errors.New("too many addresses")

// span is an inclusive run of addresses of one family.
type span struct{ first, last netip.Addr }

// size is the number of addresses in s, if it fits in a uint64.
func (s span) size() (uint64, bool) {
	f, l := s.first.As16(), s.last.As16()
	hi := binary.BigEndian.Uint64(l[:8]) - binary.BigEndian.Uint64(f[:8])
	lo := binary.BigEndian.Uint64(l[8:]) - binary.BigEndian.Uint64(f[8:])
	if binary.BigEndian.Uint64(l[8:]) < binary.BigEndian.Uint64(f[8:]) {
		hi-- // borrow
	}
	if hi != 0 || lo == math.MaxUint64 {
		return 0, false
	}
	return lo + 1, true
}

// parseEntry reads one pool entry: an address ("10.0.0.5"), an inclusive range
// ("127.0.1.1-127.0.4.250") or a CIDR ("127.0.1.0/24").
func parseEntry(s string) (span, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		return parseCIDR(s)
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		if _, err := netip.ParseAddr(s); err != nil {
			return span{}, errors.New("not an IP address, a range (first-last) or a CIDR (address/bits)")
		}
	}
	first, err := parseAddr(lo)
	if err != nil {
		return span{}, err
	}
	if !isRange {
		return span{first, first}, nil
	}
	last, err := parseAddr(hi)
	switch {
	case err != nil:
		return span{}, err
	case first.Is4() != last.Is4():
		return span{}, errors.New("the range mixes IPv4 and IPv6")
	case last.Less(first):
		return span{}, errors.New("the range ends before it starts")
	}
	return span{first, last}, nil
}

// parseCIDR reads a prefix as the addresses a host on that subnet may have: an IPv4 prefix of
// /30 or shorter without its network and broadcast addresses, an IPv6 prefix of /126 or
// shorter without its all-zeros (subnet-router anycast) address. Addresses so configured on
// an interface other than lo would not take a listener, or would clash with the subnet.
func parseCIDR(s string) (span, error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return span{}, fmt.Errorf("not an address, a range or a CIDR: %w", err)
	}
	if pfx.Addr().Zone() != "" {
		return span{}, errors.New("a zone cannot be part of a listen address")
	}
	if pfx.Addr().Is4In6() {
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		if pfx.Bits() < 0 {
			return span{}, errors.New("an IPv4-mapped prefix must be /96 or longer")
		}
	}
	if m := pfx.Masked(); m != pfx {
		return span{}, fmt.Errorf("host bits are set; the prefix is %s", m)
	}
	first, last := pfx.Addr(), lastOf(pfx)
	hostBits := first.BitLen() - pfx.Bits()
	switch {
	case first.Is4() && hostBits >= 2:
		first, last = first.Next(), last.Prev()
	case first.Is6() && hostBits >= 2:
		first = first.Next()
	}
	if _, err := parseAddr(first.String()); err != nil {
		return span{}, err
	}
	if _, err := parseAddr(last.String()); err != nil {
		return span{}, err
	}
	return span{first, last}, nil
}

// lastOf is the highest address in pfx.
func lastOf(pfx netip.Prefix) netip.Addr {
	b := pfx.Addr().AsSlice()
	for i := range b {
		if bit := i * 8; bit+8 <= pfx.Bits() {
			continue
		} else if bit >= pfx.Bits() {
			b[i] = 0xff
		} else {
			b[i] |= 0xff >> (pfx.Bits() - bit)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return a, fmt.Errorf("%q is not an IP address", strings.TrimSpace(s))
	}
	if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
		return a, fmt.Errorf("%s cannot be a listen address", a)
	}
	return a.Unmap(), nil
}
