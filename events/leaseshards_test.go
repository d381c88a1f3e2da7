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
