package events

import (
	"testing"
	"time"
)

func TestAddressPrefix(t *testing.T) {
	cases := []struct {
		addr       string
		v4, v6     int
		want       string
		wantExists bool
	}{
		{"203.0.113.10", 24, 64, "203.0.113.0/24", true},
		{"203.0.113.10", 32, 128, "203.0.113.10/32", true},
		{"::ffff:203.0.113.10", 24, 64, "203.0.113.0/24", true}, // a mapped address is its IPv4
		{"2001:db8:1:2:3::4", 24, 64, "2001:db8:1:2::/64", true},
		{"2001:db8::4", 24, 0, "", false}, // no IPv6 neighbourhood
		{"203.0.113.10", 33, 64, "", false},
		{"203.0.113.10", 0, 64, "", false},
		{"not-an-address", 24, 64, "", false},
		{"", 24, 64, "", false},
	}
	for _, c := range cases {
		p, ok := AddressPrefix(c.addr, c.v4, c.v6)
		if ok != c.wantExists || (ok && p.String() != c.want) {
			t.Errorf("AddressPrefix(%q, %d, %d) = %v, %v; want %q, %v", c.addr, c.v4, c.v6, p, ok, c.want, c.wantExists)
		}
	}
}

func TestQuarantineHolds(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	q := Quarantine{V: 1, Address: "127.0.62.10", Prefix: "127.0.62.8/30", Until: at}
	cases := []struct {
		addr string
		want bool
	}{
		{"127.0.62.10", true}, {"127.0.62.8", true}, {"127.0.62.11", true},
		{"127.0.62.12", false}, {"127.0.63.10", false}, {"::ffff:127.0.62.9", true},
		{"", false}, {"garbage", false}, {"2001:db8::1", false},
	}
	for _, c := range cases {
		if got := q.Holds(c.addr); got != c.want {
			t.Errorf("Holds(%q) = %v, want %v", c.addr, got, c.want)
		}
	}
	if (Quarantine{Prefix: "nonsense"}).Holds("127.0.62.10") {
		t.Error("a prefix that does not parse holds an address")
	}
	if !q.Live(at.Add(-time.Nanosecond)) || q.Live(at) {
		t.Error("Live: want true before Until, false from it")
	}
	avoid := Quarantine{Prefix: "198.51.100.0/24", Instance: "::ffff:10.0.0.7"}.Avoid()
	if len(avoid) != 2 || avoid[0].String() != "198.51.100.0/24" || avoid[1].String() != "10.0.0.7/32" {
		t.Errorf("Avoid = %v, want the prefix and the instance's own address", avoid)
	}
	if avoid := (Quarantine{Prefix: "garbage"}).Avoid(); len(avoid) != 0 {
		t.Errorf("Avoid of a record that does not parse = %v", avoid)
	}
	if got := QuarantineKey("2001:db8::1"); got != "2001_db8__1" {
		t.Errorf("QuarantineKey = %q", got)
	}
}
