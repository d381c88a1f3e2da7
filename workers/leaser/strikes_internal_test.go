package leaser

import (
	"math"
	"testing"
	"time"
)

func TestEscalated(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name    string
		base    time.Duration
		strikes int
		factor  float64
		limit   time.Duration
		want    time.Duration
	}{
		{"first block", 10 * s, 1, 2, time.Hour, 10 * s},
		{"second", 10 * s, 2, 2, time.Hour, 20 * s},
		{"third", 10 * s, 3, 2, time.Hour, 40 * s},
		{"capped", 10 * s, 10, 2, time.Minute, time.Minute},
		{"fractional factor, whole seconds", 10 * s, 2, 1.55, time.Hour, 15 * s},
		{"factor 1 is off", 10 * s, 5, 1, time.Hour, 10 * s},
		{"no strike count", 10 * s, 0, 3, time.Hour, 10 * s},
		{"a named cooldown above the cap stays", 2 * time.Hour, 3, 2, time.Hour, 2 * time.Hour},
		{"overflow", 10 * s, 10000, 100, 24 * time.Hour, 24 * time.Hour},
		{"NaN factor", 10 * s, 3, math.NaN(), time.Hour, 10 * s},
	} {
		if got := escalated(c.base, c.strikes, c.factor, c.limit); got != c.want {
			t.Errorf("%s: escalated(%v, %d, %v, %v) = %v, want %v", c.name, c.base, c.strikes, c.factor, c.limit, got, c.want)
		}
	}
}

func TestEscalationCheck(t *testing.T) {
	for _, c := range []struct {
		e  Escalation
		ok bool
	}{
		{Escalation{}, true},
		{Escalation{Factor: 2}, true},
		{Escalation{Factor: 0.5}, false},
		{Escalation{Factor: math.NaN()}, false},
		{Escalation{Factor: 101}, false},
		{Escalation{Factor: 2, Cap: 48 * time.Hour}, false},
		{Escalation{Factor: 2, Cap: 1500 * time.Millisecond}, false},
		{Escalation{Factor: 2, Memory: time.Millisecond}, false},
	} {
		e := c.e
		if err := e.check(DefaultMaxCooldown); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.e, err, c.ok)
		}
	}
}
