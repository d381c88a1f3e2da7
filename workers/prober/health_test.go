package prober

import (
	"errors"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

func specCheck(interval, failure, success int) schemas.HealthCheck {
	return schemas.HealthCheck{IntervalSeconds: interval, TimeoutSeconds: 1, FailureThreshold: failure, SuccessThreshold: success}
}

func TestNextHealth(t *testing.T) {
	const addr = "10.0.0.5:3128"
	ok := result{latency: 1500 * time.Microsecond, pathResult: pathResult{echo: true, egressIP: "203.0.113.7", leaked: []string{"Via"}, anonymity: events.AnonymityAnonymous}}
	bad := result{pathResult: pathResult{err: errors.New("dial proxy: connection refused")}}
	// Each case is a sequence of probes (true = success) and the Healthy value and
	// transition after each.
	for _, tc := range []struct {
		name       string
		fail, succ int
		probes     []bool
		healthy    []bool
		transition []bool
	}{
		{"first success with threshold 1", 3, 1, []bool{true}, []bool{true}, []bool{true}},
		{"successes up to the threshold", 3, 2, []bool{true, true, true}, []bool{false, true, true}, []bool{false, true, false}},
		{"first verdict unhealthy", 2, 1, []bool{false, false, false}, []bool{false, false, false}, []bool{false, true, false}},
		{"failures below the threshold keep healthy", 3, 1, []bool{true, false, false, true}, []bool{true, true, true, true}, []bool{true, false, false, false}},
		{"down and back", 2, 2, []bool{true, true, false, false, true, true},
			[]bool{false, true, true, false, false, true}, []bool{false, true, false, true, false, true}},
		{"flapping below both thresholds keeps the verdict", 2, 2, []bool{false, false, true, false, true, false},
			[]bool{false, false, false, false, false, false}, []bool{false, true, false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *events.ProxyHealth
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, success := range tc.probes {
				at = at.Add(time.Second)
				o := observation{proxy: "p1", address: addr, checkURL: "http://echo/", prober: "w", at: at, check: specCheck(10, tc.fail, tc.succ), res: bad}
				if success {
					o.res = ok
				}
				h, ch := nextHealth(prev, o)
				transition := ch.health
				if h.Healthy != tc.healthy[i] || transition != tc.transition[i] {
					t.Fatalf("probe %d: healthy %v transition %v, want %v %v: %+v", i+1, h.Healthy, transition, tc.healthy[i], tc.transition[i], h)
				}
				if transition != (h.LastTransitionAt == at) {
					t.Errorf("probe %d: LastTransitionAt %v", i+1, h.LastTransitionAt)
				}
				if success && (h.LastError != "" || h.LatencyMs != 1.5 || h.EgressIP != "203.0.113.7" || h.LastSuccessAt != at || h.ConsecutiveFailures != 0) {
					t.Errorf("probe %d: success fields %+v", i+1, h)
				}
				if !success && (h.LastError != bad.err.Error() || h.ConsecutiveSuccesses != 0) {
					t.Errorf("probe %d: failure fields %+v", i+1, h)
				}
				if !success && prev != nil && (h.LatencyMs != prev.LatencyMs || h.EgressIP != prev.EgressIP) {
					t.Errorf("probe %d: a failure changed the last success's details", i+1)
				}
				prev = &h
			}
		})
	}
}

func TestNextHealthNewAddress(t *testing.T) {
	prev := &events.ProxyHealth{V: 1, Proxy: "p1", Address: "10.0.0.5:3128", Healthy: true, ConsecutiveSuccesses: 9,
		LatencyMs: 3, EgressIP: "203.0.113.7", LastTransitionAt: time.Unix(1, 0), SuccessThreshold: 1, FailureThreshold: 3}
	o := observation{proxy: "p1", address: "10.0.0.6:3128", at: time.Unix(100, 0), check: specCheck(10, 3, 2),
		res: result{pathResult: pathResult{err: errors.New("refused")}}}
	h, ch := nextHealth(prev, o)
	transition := ch.health
	if h.Healthy || h.ConsecutiveFailures != 1 || h.ConsecutiveSuccesses != 0 || h.EgressIP != "" || h.LatencyMs != 0 || transition {
		t.Fatalf("%+v transition %v", h, transition)
	}
}

func TestTTL(t *testing.T) {
	for interval, want := range map[int]time.Duration{1: 3 * time.Second, 2: 6 * time.Second, 30: 90 * time.Second} {
		if got := ttlFor(specCheck(interval, 1, 1)); got != want {
			t.Errorf("interval %d: ttl %v, want %v", interval, got, want)
		}
	}
}
