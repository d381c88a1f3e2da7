package schemas

import "testing"

func hashBase(t *testing.T) ProxySpec {
	t.Helper()
	s, err := ParseProxySpec([]byte(`{"provider":"kvm-home",
		"placement":{"region":"eu","zone":"beelink","machineType":"small","image":"debian-13"},
		"auth":{"username":"crawler","password":"pw"},"attributes":{"geo":"home"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var hashUserData = []byte("#cloud-config\npackages: [squid]\n")

// The pinned value is what running instances are compared with: if it changes, every managed
// proxy is replaced on upgrade. Change it only on purpose.
const pinnedHash = "6d17263b2268d9fa"

func TestHashPinned(t *testing.T) {
	if got := hashBase(t).Hash(hashUserData); got != pinnedHash {
		t.Fatalf("Hash = %s, pinned %s: a changed hash replaces every managed instance", got, pinnedHash)
	}
}

func TestHashIsStable(t *testing.T) {
	s := hashBase(t)
	if a, b := s.Hash(hashUserData), s.Hash(hashUserData); a != b {
		t.Fatalf("two calls gave %s and %s", a, b)
	}
}

func TestHashCoversTheInstance(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*ProxySpec)
		userData []byte
	}{
		{"region", func(s *ProxySpec) { s.Placement.Region = "us" }, hashUserData},
		{"zone", func(s *ProxySpec) { s.Placement.Zone = "other" }, hashUserData},
		{"machineType", func(s *ProxySpec) { s.Placement.MachineType = "large" }, hashUserData},
		{"image", func(s *ProxySpec) { s.Placement.Image = "debian-14" }, hashUserData},
		{"port", func(s *ProxySpec) { s.Port = 3129 }, hashUserData},
		{"user-data", func(*ProxySpec) {}, append([]byte("#"), hashUserData...)},
		{"no user-data", func(*ProxySpec) {}, nil},
		// Length prefixes keep a value from sliding into its neighbour.
		{"placement boundary", func(s *ProxySpec) { s.Placement.Region, s.Placement.Zone = "eub", "eeline" }, hashUserData},
	}
	base := hashBase(t).Hash(hashUserData)
	for _, tc := range tests {
		s := hashBase(t)
		tc.change(&s)
		if s.Hash(tc.userData) == base {
			t.Errorf("changing %s left the hash at %s", tc.name, base)
		}
	}
}

func TestHashIgnoresWhatNeverReplaces(t *testing.T) {
	zero, many := 0, 50
	tests := []struct {
		name   string
		change func(*ProxySpec)
	}{
		{"attributes", func(s *ProxySpec) { s.Attributes = map[string]string{"geo": "de", "tier": "x"} }},
		{"no attributes", func(s *ProxySpec) { s.Attributes = nil }},
		{"maxLeases", func(s *ProxySpec) { s.MaxLeases = &many }},
		{"drained", func(s *ProxySpec) { s.MaxLeases = &zero }},
		{"healthCheck", func(s *ProxySpec) {
			s.HealthCheck = HealthCheck{IntervalSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 9, SuccessThreshold: 4, URL: "https://x/"}
		}},
		{"auth", func(s *ProxySpec) { s.Auth = &Auth{Username: "other", Password: "changed"} }},
		{"no auth", func(s *ProxySpec) { s.Auth = nil }},
		// A pool takes a proxy in, and drains it, without touching its instance.
		{"pool", func(s *ProxySpec) { s.Pool = "de-fleet" }},
		{"drain", func(s *ProxySpec) { s.Drain = true }},
		// The hash takes the resolved user-data; where it came from does not matter.
		{"cloudInitRef", func(s *ProxySpec) { s.CloudInitRef = "crawl-squid" }},
	}
	base := hashBase(t).Hash(hashUserData)
	for _, tc := range tests {
		s := hashBase(t)
		tc.change(&s)
		if got := s.Hash(hashUserData); got != base {
			t.Errorf("changing %s changed the hash from %s to %s", tc.name, base, got)
		}
	}
}
