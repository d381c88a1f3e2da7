package prober

import (
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// observation is one probe's outcome with what the record needs to say about it.
type observation struct {
	proxy    string
	address  string // host:port probed
	checkURL string // redacted
	prober   string
	at       time.Time
	check    schemas.HealthCheck
	res      result
}

// nextHealth folds an observation into the previous record (nil when there is none) and
// reports whether it is a transition: Healthy flipped, or the first verdict appeared.
//
// A record about another address describes the instance a replaced proxy had, so the new one
// starts from nothing rather than inheriting its predecessor's standing.
func nextHealth(prev *events.ProxyHealth, o observation) (events.ProxyHealth, bool) {
	if prev != nil && prev.Address != o.address {
		prev = nil
	}
	var h events.ProxyHealth
	if prev != nil {
		h = *prev
	}
	h.V, h.Proxy, h.Address, h.CheckURL, h.Prober, h.LastProbeAt = 1, o.proxy, o.address, o.checkURL, o.prober, o.at
	h.SuccessThreshold, h.FailureThreshold = o.check.SuccessThreshold, o.check.FailureThreshold
	if o.res.err == nil {
		h.ConsecutiveSuccesses++
		h.ConsecutiveFailures = 0
		h.LastError = ""
		h.LastSuccessAt = o.at
		h.LatencyMs = float64(o.res.latency.Microseconds()) / 1000
		// What the target saw is known only from an echo; another check URL says nothing.
		h.EgressIP, h.LeakedHeaders = "", nil
		if o.res.echo {
			h.EgressIP, h.LeakedHeaders = o.res.egressIP, o.res.leaked
		}
	} else {
		// Latency, egress IP and leaks keep describing the last success.
		h.ConsecutiveFailures++
		h.ConsecutiveSuccesses = 0
		h.LastError = o.res.err.Error()
	}
	switch {
	case h.ConsecutiveSuccesses >= h.SuccessThreshold:
		h.Healthy = true
	case h.ConsecutiveFailures >= h.FailureThreshold:
		h.Healthy = false
	}
	// The first verdict is the one that first sets LastTransitionAt; unknown → unhealthy is a
	// transition too, though Healthy was already false.
	first := (prev == nil || prev.LastTransitionAt.IsZero()) && h.Judged()
	flipped := prev != nil && prev.Healthy != h.Healthy
	if first || flipped {
		h.LastTransitionAt = o.at
	}
	return h, first || flipped
}

// ttlFor is how long a record lives unless a probe renews it: three intervals, at least 3 s.
func ttlFor(check schemas.HealthCheck) time.Duration {
	return max(3*time.Duration(check.IntervalSeconds)*time.Second, 3*time.Second)
}
