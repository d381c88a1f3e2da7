package local

import (
	"net/netip"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"defaults", Config{StateDir: "/x"}, ""},
		{"singles and ranges", Config{StateDir: "/x", Addresses: []string{"10.0.0.5", "10.0.1.1-10.0.1.9", "::1"}}, ""},
		{"no state dir", Config{}, "stateDir: is required"},
		{"not an address", Config{StateDir: "/x", Addresses: []string{"127.0.0.2", "host"}}, `addresses[1] "host": not an IP address, a range`},
		{"a CIDR", Config{StateDir: "/x", Addresses: []string{"127.0.1.0/24", "127.0.2.1-127.0.4.250"}}, ""},
		{"bad CIDR", Config{StateDir: "/x", Addresses: []string{"127.0.1.0/33"}}, `addresses[0] "127.0.1.0/33": not an address, a range or a CIDR`},
		{"reversed", Config{StateDir: "/x", Addresses: []string{"127.0.0.9-127.0.0.2"}}, `addresses[0] "127.0.0.9-127.0.0.2": the range ends before it starts`},
		{"mixed families", Config{StateDir: "/x", Addresses: []string{"127.0.0.1-::1"}}, "mixes IPv4 and IPv6"},
		{"overlap", Config{StateDir: "/x", Addresses: []string{"127.0.0.2-127.0.0.9", "127.0.0.5"}}, `addresses[1] "127.0.0.5": 127.0.0.5 is already`},
		{"unspecified", Config{StateDir: "/x", Addresses: []string{"0.0.0.0"}}, `addresses[0] "0.0.0.0": 0.0.0.0 cannot be`},
		{"too big", Config{StateDir: "/x", Addresses: []string{"10.0.0.0-10.1.0.0"}}, `addresses[0] "10.0.0.0-10.1.0.0": too many addresses: this entry holds 65537`},
		{"negative ops", Config{StateDir: "/x", MaxConcurrentOps: -1}, "maxConcurrentOps:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Validate = %v, want an error with %q", err, c.want)
			}
			if _, nerr := New("local", c.cfg, nil); (nerr == nil) != (err == nil) {
				t.Errorf("New and Validate disagree: %v vs %v", nerr, err)
			}
		})
	}
}

func TestPoolAndDefaults(t *testing.T) {
	pool, err := Config{StateDir: "/x"}.pool()
	if err != nil || len(pool) != 253 || pool[0].String() != "127.0.0.2" || pool[252].String() != "127.0.0.254" {
		t.Errorf("default pool: %d addresses from %v, %v", len(pool), pool[:1], err)
	}
	pool, _ = Config{Addresses: []string{"10.0.0.254-10.0.1.1", " 10.0.0.1 "}}.pool()
	var got []string
	for _, a := range pool {
		got = append(got, a.String())
	}
	if strings.Join(got, " ") != "10.0.0.254 10.0.0.255 10.0.1.0 10.0.1.1 10.0.0.1" {
		t.Errorf("pool = %v", got)
	}

	c := Config{}
	if !c.bindSource(netip.MustParseAddr("203.0.113.7")) || c.bindSource(netip.MustParseAddr("127.0.0.2")) || c.bindSource(netip.MustParseAddr("::1")) {
		t.Error("default bindSource: want true for public, false for loopback")
	}
	no := false
	c.BindSource = &no
	if c.bindSource(netip.MustParseAddr("203.0.113.7")) {
		t.Error("bindSource: false not honoured")
	}
	if c.maxOps() != 2 || strings.Join(c.binaryArgs(), " ") != "forward-proxy" {
		t.Errorf("defaults: ops %d args %v", c.maxOps(), c.binaryArgs())
	}
	c.BinaryArgs = []string{}
	if len(c.binaryArgs()) != 0 {
		t.Error("an empty BinaryArgs must mean no arguments")
	}
}

func TestParseID(t *testing.T) {
	if name, err := parseID("local/egress-abc"); err != nil || name != "egress-abc" {
		t.Errorf("parseID = %q, %v", name, err)
	}
	for _, id := range []string{"", "local/", "local/a/b", "local/..", "Local/x", "local/X", "x/egress"} {
		if _, err := parseID(id); err == nil {
			t.Errorf("parseID(%q) accepted", id)
		}
	}
}
