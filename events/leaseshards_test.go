package events

import "testing"

// The shard names and the hash are wire: every process, of every version, must agree, so
// the figures are pinned (FNV-1a 32 of the name, modulo the count).
func TestLeaseShards(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want string
	}{{0, "proxy_leases"}, {1, "proxy_leases_1"}, {4, "proxy_leases_4"}} {
		if got := LeaseBucket(tc.i); got != tc.want {
			t.Errorf("LeaseBucket(%d) = %s, want %s", tc.i, got, tc.want)
		}
	}
	for _, tc := range []struct {
		proxy string
		n     int
		want  int
	}{
		{"px-1", 0, 0}, {"px-1", 1, 0},
		{"p1", 3, 1}, {"p2", 3, 2}, {"p3", 3, 0}, {"px-1", 3, 1}, {"de-1", 3, 2},
		{"p1", 5, 4}, {"p2", 5, 0}, {"px-1", 5, 2},
	} {
		if got := LeaseShard(tc.proxy, tc.n); got != tc.want {
			t.Errorf("LeaseShard(%s, %d) = %d, want %d", tc.proxy, tc.n, got, tc.want)
		}
	}
}

// A slot key has one form: <proxy>.<slot>, the slot canonical and below MaxSlot.
func TestSlotKey(t *testing.T) {
	if got := SlotKey("crawl-1", 3); got != "crawl-1.3" {
		t.Errorf("SlotKey = %s", got)
	}
	for _, tc := range []struct {
		key   string
		proxy string
		slot  int
		ok    bool
	}{
		{"crawl-1.3", "crawl-1", 3, true},
		{"p.0", "p", 0, true},
		{"p.9999", "p", 9999, true},
		{"p.10000", "p", 10000, false},
		{"p.03", "p", 0, false},
		{"p.-1", "p", 0, false},
		{"p.", "p", 0, false},
		{"p.1.x", "p", 0, false},
		{".1", "", 1, false},
		{"p", "", 0, false},
		{"", "", 0, false},
	} {
		proxy, slot, ok := ParseSlotKey(tc.key)
		if ok != tc.ok || (ok && (proxy != tc.proxy || slot != tc.slot)) {
			t.Errorf("ParseSlotKey(%q) = %q, %d, %v; want %q, %d, %v", tc.key, proxy, slot, ok, tc.proxy, tc.slot, tc.ok)
		}
		if ok && SlotKey(proxy, slot) != tc.key {
			t.Errorf("SlotKey(ParseSlotKey(%q)) = %q", tc.key, SlotKey(proxy, slot))
		}
	}
}

func FuzzParseSlotKey(f *testing.F) {
	for _, s := range []string{"crawl-1.3", "p.0", "p.03", "", ".", "a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		proxy, slot, ok := ParseSlotKey(key)
		if ok && (SlotKey(proxy, slot) != key || slot < 0 || slot >= MaxSlot) {
			t.Fatalf("ParseSlotKey(%q) = %q, %d accepted a key that is not canonical", key, proxy, slot)
		}
	})
}
