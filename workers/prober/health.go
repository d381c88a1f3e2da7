package prober

import (
	"slices"
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
	expected string // the address traffic should leave from, "" when unknown (expectedEgress)
	res      result
}

// changes is what a probe turned: Healthy (or the first verdict appeared), and the anonymity
// verdict (from one known verdict to another).
type changes struct {
	health, anonymity bool
	was               events.Anonymity // the verdict before, when anonymity moved
}

// nextHealth folds an observation into the previous record (nil when there is none) and
// reports what changed: Healthy flipped or the first verdict appeared, or the anonymity
// verdict moved.
//
// Paths always say what this probe saw. The anonymity verdict and the leaked headers are
// this probe's when every path that can give a verdict gave one. When one failed this time
// (a proxy down, a forward path refused once) the verdict is not improved on the strength of
// the rest: a leak seen on one path is a leak, but a path not seen is not cleared, so a
// transient failure does not flap the verdict. A probe with no verdict at all keeps the last.
//
// A record about another address describes the instance a replaced proxy had, so the new one
// starts from nothing rather than inheriting its predecessor's standing.
func nextHealth(prev *events.ProxyHealth, o observation) (events.ProxyHealth, changes) {
	if prev != nil && prev.Address != o.address {
		prev = nil
	}
	var h events.ProxyHealth
	if prev != nil {
		h = *prev
	}
	h.V, h.Proxy, h.Address, h.CheckURL, h.Prober, h.LastProbeAt = 1, o.proxy, o.address, o.checkURL, o.prober, o.at
	h.SuccessThreshold, h.FailureThreshold = o.check.SuccessThreshold, o.check.FailureThreshold
	h.ExpectedEgress = o.expected
	h.Paths = o.res.paths()
	switch a, leaked, complete := verdict(h.Paths); {
	case complete:
		h.Anonymity, h.LeakedHeaders = a, leaked
	case a != "":
		h.Anonymity = least(a, h.Anonymity)
		h.LeakedHeaders = slices.Clone(h.LeakedHeaders) // prev's array is not this record's
		for _, name := range leaked {
			if !slices.Contains(h.LeakedHeaders, name) {
				h.LeakedHeaders = append(h.LeakedHeaders, name)
			}
		}
	}
	if o.res.err == nil {
		h.ConsecutiveSuccesses++
		h.ConsecutiveFailures = 0
		h.LastError = ""
		h.LastSuccessAt = o.at
		h.LatencyMs = float64(o.res.latency.Microseconds()) / 1000
		// The egress address is the CONNECT path's, known only from an echo; another check
		// URL says nothing.
		h.EgressIP = ""
		if o.res.echo {
			h.EgressIP = o.res.egressIP
		}
	} else {
		// Latency and egress IP keep describing the last success.
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
	ch := changes{health: first || flipped}
	if prev != nil && prev.Anonymity != "" && h.Anonymity != "" && prev.Anonymity != h.Anonymity {
		ch.anonymity, ch.was = true, prev.Anonymity
	}
	return h, ch
}

// ttlFor is how long a record lives unless a probe renews it: three intervals, at least 3 s.
func ttlFor(check schemas.HealthCheck) time.Duration {
	return max(3*time.Duration(check.IntervalSeconds)*time.Second, 3*time.Second)
}
