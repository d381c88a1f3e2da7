package local

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
)

func TestPoolEntries(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []string
		n       int    // pool size
		first   string // first and last address of the pool
		last    string
		err     string // substring of the error; "" for valid
	}{
		{"default", nil, 253, "127.0.0.2", "127.0.0.254", ""},
		{"one address", []string{"10.0.0.5"}, 1, "10.0.0.5", "10.0.0.5", ""},
		{"range across octets", []string{"127.0.1.1-127.0.4.250"}, 4*256 - 6, "127.0.1.1", "127.0.4.250", ""},
		{"CIDR /24: its 254 hosts", []string{"127.0.1.0/24"}, 254, "127.0.1.1", "127.0.1.254", ""},
		{"CIDR /22", []string{"127.0.4.0/22"}, 1022, "127.0.4.1", "127.0.7.254", ""},
		{"CIDR /30", []string{"127.0.9.4/30"}, 2, "127.0.9.5", "127.0.9.6", ""},
		{"CIDR /31: both", []string{"127.0.9.8/31"}, 2, "127.0.9.8", "127.0.9.9", ""},
		{"CIDR /32", []string{"127.0.9.10/32"}, 1, "127.0.9.10", "127.0.9.10", ""},
		{"IPv6 CIDR: no all-zeros address", []string{"fd00::/120"}, 255, "fd00::1", "fd00::ff", ""},
		{"IPv6 /128", []string{"fd00::7/128"}, 1, "fd00::7", "fd00::7", ""},
		{"spaces are trimmed", []string{" 127.0.1.0/30 ", " 127.0.2.1 - 127.0.2.2 "}, 4, "127.0.1.1", "127.0.2.2", ""},
		{"a 1,000-proxy pool", []string{"127.0.1.0/24", "127.0.2.0/24", "127.0.3.0/24", "127.0.4.0/24"}, 1016, "127.0.1.1", "127.0.4.254", ""},
		{"exactly the cap", []string{"10.0.0.0-10.0.255.255"}, maxPoolSize, "10.0.0.0", "10.0.255.255", ""},

		{"host bits set", []string{"127.0.1.5/24"}, 0, "", "", `addresses[0] "127.0.1.5/24": host bits are set; the prefix is 127.0.1.0/24`},
		{"prefix too long", []string{"127.0.1.0/33"}, 0, "", "", `addresses[0] "127.0.1.0/33": not an address, a range or a CIDR`},
		{"a name", []string{"10.0.0.1", "localhost"}, 0, "", "", `addresses[1] "localhost": not an IP address`},
		{"bad range end", []string{"127.0.0.2-127.0.0.x"}, 0, "", "", `addresses[0] "127.0.0.2-127.0.0.x": "127.0.0.x" is not an IP address`},
		{"zone", []string{"fe80::1%eth0"}, 0, "", "", `addresses[0] "fe80::1%eth0": fe80::1%eth0 cannot be`},
		{"multicast CIDR", []string{"224.0.0.0/24"}, 0, "", "", `addresses[0] "224.0.0.0/24": 224.0.0.1 cannot be`},
		{"a /8 fails before it is expanded", []string{"127.0.0.0/8"}, 0, "", "", `addresses[0] "127.0.0.0/8": too many addresses: this entry holds 16777214`},
		{"an IPv6 /64", []string{"fd00::/64"}, 0, "", "", `addresses[0] "fd00::/64": too many addresses: this entry holds 18446744073709551615`},
		{"IPv6 /8", []string{"fd00::/8"}, 0, "", "", "this entry holds more than 2^64"},
		{"the cap counts every entry", []string{"10.0.0.0/16", "10.1.0.0/29"}, 0, "", "", `addresses[1] "10.1.0.0/29": too many addresses: this entry holds 6 and the entries before it 65534; a pool holds at most 65536`},
		{"overlap between a CIDR and a range", []string{"127.0.1.0/24", "127.0.1.200-127.0.2.5"}, 0, "", "", `addresses[1] "127.0.1.200-127.0.2.5": 127.0.1.200 is already in the pool`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool, err := Config{Addresses: c.entries}.pool()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("pool(%q) = %d addresses, %v; want an error with %q", c.entries, len(pool), err, c.err)
				}
				if strings.Contains(c.err, "too many") && !errors.Is(err, errPoolTooBig) {
					t.Errorf("error %v is not errPoolTooBig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("pool(%q): %v", c.entries, err)
			}
			if len(pool) != c.n || pool[0].String() != c.first || pool[len(pool)-1].String() != c.last {
				t.Errorf("pool(%q) = %d addresses %v..%v, want %d %s..%s", c.entries, len(pool), pool[0], pool[len(pool)-1], c.n, c.first, c.last)
			}
			for i := 1; i < len(pool) && len(c.entries) == 1; i++ {
				if !pool[i-1].Less(pool[i]) {
					t.Fatalf("pool not in order at %d: %v then %v", i, pool[i-1], pool[i])
				}
			}
		})
	}
}

func FuzzPoolEntry(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "127.0.1.0/24", "10.0.0.1-10.0.0.9", "fd00::/120", "::/0", "1.2.3.4/33", "-", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pool, err := Config{Addresses: []string{s}}.pool()
		if err == nil && (len(pool) == 0 || len(pool) > maxPoolSize) {
			t.Fatalf("pool(%q) = %d addresses", s, len(pool))
		}
		if err != nil && !strings.HasPrefix(err.Error(), fmt.Sprintf("addresses[0] %q: ", s)) {
			t.Fatalf("error %q does not name the key and the entry", err)
		}
	})
}

// TestProxiesBeyondTheDefaultPool runs real proxies on loopback addresses past 127.0.0.254,
// from a range across an octet boundary and a CIDR, and reaches each: Linux routes all of
// 127.0.0.0/8 to lo, so a bigger pool needs no set-up. A handful stand for the 1,000 a user
// may configure.
func TestProxiesBeyondTheDefaultPool(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Addresses = []string{"127.78.0.254-127.78.1.1", "127.78.4.0/30"}
	yes := true
	cfg.BindSource = &yes // each proxy also leaves from its address, so it is used both ways
	p := newProvider(t, cfg)
	port := freePort(t)
	srv := upstream(t)
	want := []string{"127.78.0.254", "127.78.0.255", "127.78.1.0", "127.78.1.1", "127.78.4.1", "127.78.4.2"}
	for i, addr := range want {
		inst := mustCreate(t, p, request(fmt.Sprintf("egress-wide-%d", i), port))
		if inst.Address != addr {
			t.Errorf("instance %d on %s, want %s (pool order)", i, inst.Address, addr)
		}
		if status, body := through(t, inst, nil, srv.URL); status != 200 || body != inst.Address {
			t.Errorf("through %s: %d, upstream saw %q; want 200 from the proxy's own address", inst.Address, status, body)
		}
	}
	if _, err := p.Create(ctxT(t), request("egress-wide-full", port)); !errors.Is(err, providers.ErrQuota) {
		t.Errorf("a seventh Create in a pool of six: %v, want ErrQuota", err)
	}
}
