package events

import (
	"testing"
	"time"
)

func TestAnonymityVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &ProxyHealth{Address: "10.0.0.1:3128", Anonymity: AnonymityElite, LastProbeAt: t0}
	for _, tc := range []struct {
		name    string
		h       *ProxyHealth
		address string
		since   time.Time
		want    Anonymity
	}{
		{"about the instance", h, "10.0.0.1:3128", t0.Add(-time.Minute), AnonymityElite},
		{"another address", h, "10.0.0.2:3128", time.Time{}, ""},
		{"a predecessor at the same address", h, "10.0.0.1:3128", t0.Add(time.Second), ""},
		{"no record", nil, "10.0.0.1:3128", time.Time{}, ""},
	} {
		if got := tc.h.AnonymityVerdict(tc.address, tc.since, 0, t0.Add(time.Hour)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAnonymityVerdictGoesStaleWithTheHealthVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &ProxyHealth{Address: "10.0.0.1:3128", Anonymity: AnonymityElite, LastProbeAt: t0}
	interval := 30 * time.Second
	if got := h.AnonymityVerdict(h.Address, time.Time{}, interval, t0.Add(ProbeOverdueAfter(interval))); got != AnonymityElite {
		t.Errorf("within the overdue bound: %q", got)
	}
	if got := h.AnonymityVerdict(h.Address, time.Time{}, interval, t0.Add(ProbeOverdueAfter(interval)+time.Second)); got != "" {
		t.Errorf("overdue: %q, want unknown", got)
	}
}

func TestEchoed(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *ProxyHealth
		want bool
	}{
		{"no record", nil, false},
		{"no paths", &ProxyHealth{}, false},
		{"a verdict", &ProxyHealth{Anonymity: AnonymityAnonymous}, true},
		{"paths without a verdict", &ProxyHealth{Paths: []PathCheck{{Path: PathForward, Error: "refused"}}}, true},
	} {
		if got := tc.h.Echoed(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEgressMismatch(t *testing.T) {
	for _, tc := range []struct {
		name           string
		seen, expected string
		want           bool
	}{
		{"nothing expected", "192.0.2.1", "", false},
		{"nothing seen", "", "192.0.2.1", false},
		{"as expected", "192.0.2.1", "192.0.2.1", false},
		{"mapped form is the same address", "::ffff:192.0.2.1", "192.0.2.1", false},
		{"IPv6 spelled two ways", "2001:db8::1", "2001:DB8:0::1", false},
		{"another address", "198.51.100.7", "192.0.2.1", true},
	} {
		h := &ProxyHealth{EgressIP: tc.seen, ExpectedEgress: tc.expected}
		if got := h.EgressMismatch(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if (*ProxyHealth)(nil).EgressMismatch() {
		t.Error("nil record mismatches")
	}
}
