package workers

import (
	"testing"
	"time"
)

func TestSettle(t *testing.T) {
	cases := []struct {
		class     string
		delivered int
		want      Settlement
	}{
		{"", 1, Settlement{Action: Ack, Final: true}},
		{"NotFound", 1, Settlement{Action: Ack, Final: true}},
		{"Quota", 3, Settlement{Action: Ack, Final: true}},
		{"Stale", 1, Settlement{Action: Ack, Final: true}},
		{"Permanent", 1, Settlement{Action: Term, Final: true}},
		{"Transient", 1, Settlement{Action: NakDelay, Delay: time.Second}},
		{"Transient", 3, Settlement{Action: NakDelay, Delay: 4 * time.Second}},
		{"Transient", 5, Settlement{Action: NakDelay, Delay: 16 * time.Second}},
		{"Transient", 6, Settlement{Action: Term, Final: true}},
		{"SomethingNew", 1, Settlement{Action: NakDelay, Delay: time.Second}},
	}
	for _, c := range cases {
		if got := Settle(c.class, c.delivered, 6); got != c.want {
			t.Errorf("Settle(%q, %d) = %+v, want %+v", c.class, c.delivered, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 6: 30 * time.Second, 100: 30 * time.Second} {
		if got := Backoff(n, time.Second, 30*time.Second); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
