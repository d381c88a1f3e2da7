package events

import "time"

// Buckets of probes and leases (DESIGN §3.1).
const (
	BucketProbers   = "egress_probers"
	BucketHealth    = "proxy_health"
	BucketLeases    = "proxy_leases"
	BucketCooldowns = "proxy_cooldowns"
)

// Probe subjects: probers schedule the regular probes themselves (each owns a share of the
// fleet, see ProberMember); a ProbeRequest on core NATS asks for one probe now (the leaser
// sends one when a crawler reports a failure). Probers take them in the queue group
// ProbeQueue, optionally only for some providers or hosts by subscribing to a narrower
// filter. External proxies use provider and host "external".
const (
	ProbeQueue    = "probers"
	ProbeSubjects = "egress.probe.>"
	External      = "external"
)

// ProbeSubject is where the probe request of proxy is published.
func ProbeSubject(provider, host, proxy string) string {
	return "egress.probe." + provider + "." + host + "." + proxy
}

// ProbeRequest asks a prober to check one proxy now. It carries no credentials: the prober
// reads the spec (auth, healthCheck settings) from the proxies bucket.
type ProbeRequest struct {
	V        int       `json:"v"`
	Proxy    string    `json:"proxy"`
	Provider string    `json:"provider"` // "external" for external proxies
	Host     string    `json:"host"`
	Address  string    `json:"address"` // the proxy's IP or host name
	Port     int       `json:"port"`
	Reason   Reason    `json:"reason,omitempty"` // ReasonReport
	At       time.Time `json:"at"`
}

// ProxyHealth is a prober's verdict on a proxy, in proxy_health under the proxy's name. Each
// record carries a TTL of about three probe intervals, so a proxy nobody probes any more
// reads as unknown (absent) rather than as stale health.
type ProxyHealth struct {
	V                    int      `json:"v"`
	Proxy                string   `json:"proxy"`
	Address              string   `json:"address"` // host:port that was probed
	Healthy              bool     `json:"healthy"`
	ConsecutiveSuccesses int      `json:"consecutiveSuccesses"`
	ConsecutiveFailures  int      `json:"consecutiveFailures"`
	SuccessThreshold     int      `json:"successThreshold"`
	FailureThreshold     int      `json:"failureThreshold"`
	LatencyMs            float64  `json:"latencyMs,omitempty"` // of the last successful probe
	LastError            string   `json:"lastError,omitempty"`
	EgressIP             string   `json:"egressIp,omitempty"`      // the address the check target saw
	LeakedHeaders        []string `json:"leakedHeaders,omitempty"` // Via, X-Forwarded-For, … the target received, on any path
	// Anonymity is the verdict of the less anonymous path; Paths what each path showed.
	Anonymity Anonymity   `json:"anonymity,omitempty"`
	Paths     []PathCheck `json:"paths,omitempty"`
	// ExpectedEgress is the address traffic should leave from, when it is known (the
	// instance's own address with the local provider's bindSource, an external endpoint's
	// expectedEgress); EgressIP differing from it is ReasonEgressMismatch.
	ExpectedEgress   string    `json:"expectedEgress,omitempty"`
	CheckURL         string    `json:"checkUrl"`
	Prober           string    `json:"prober"`
	LastProbeAt      time.Time `json:"lastProbeAt"`
	LastSuccessAt    time.Time `json:"lastSuccessAt,omitzero"`
	LastTransitionAt time.Time `json:"lastTransitionAt,omitzero"`
}

// Judged reports whether the thresholds have produced a verdict yet: healthy after
// SuccessThreshold successes, unhealthy after FailureThreshold failures.
func (h ProxyHealth) Judged() bool {
	return h.Healthy || h.ConsecutiveFailures >= h.FailureThreshold
}

// About reports whether h is about the instance a proxy has now: probed at address, the
// proxy's current ip:port, and not before since, when that address last appeared (AddressAt
// in its status). A replacement often gets its predecessor's ip:port; the predecessor's record
// is not about it. A nil record is about nothing.
func (h *ProxyHealth) About(address string, since time.Time) bool {
	return h != nil && address != "" && h.Address == address && !h.LastProbeAt.Before(since)
}

// Verdict is the one judgement of a proxy's health from its record, for every reader: the
// reconciler's phase, the read model's HEALTHY and egress_proxies_healthy. judged is false
// when there is no current verdict: the record is not About the proxy's instance at address
// since since, its thresholds have not produced one, or, when the probe interval is known
// (> 0), its last probe is older than ProbeOverdueAfter(interval), so nobody keeps it
// current. interval 0 leaves staleness to the record's TTL (a reader that does not know the
// spec, or the reconciler, which decides on changes rather than on the clock).
func (h *ProxyHealth) Verdict(address string, since time.Time, interval time.Duration, now time.Time) (healthy, judged bool) {
	if !h.About(address, since) || !h.Judged() {
		return false, false
	}
	if interval > 0 && now.Sub(h.LastProbeAt) > ProbeOverdueAfter(interval) {
		return false, false
	}
	return h.Healthy, true
}

// ReasonProbeOverdue is the reason a reader of the fleet (status, page, metrics) gives a
// proxy that has an address but whose last probe there is older than ProbeOverdueAfter: no
// prober is keeping up with it, so its health says nothing current.
const ReasonProbeOverdue Reason = "ProbeOverdue"

// ProbeOverdueAfter is how old a proxy's last probe at its current address (or, before its
// first, the time the address appeared) may be before it is overdue: two intervals, so one
// late probe is not an alarm, plus a slack for clock skew between processes.
func ProbeOverdueAfter(interval time.Duration) time.Duration {
	return 2*interval + 5*time.Second
}

// ProberMember is a live prober's presence in egress_probers, under its member ID, renewed
// every few seconds with a short TTL: the probers divide the fleet among the members they
// see (rendezvous hashing of proxy names over the members whose filters take the proxy), so
// a prober that stops, cleanly or not, hands its share to the others within that TTL.
type ProberMember struct {
	V           int       `json:"v"`
	ID          string    `json:"id"`
	Worker      string    `json:"worker"`
	Filters     []string  `json:"filters,omitempty"` // "provider" or "provider.host"; none takes every proxy
	Concurrency int       `json:"concurrency"`
	StartedAt   time.Time `json:"startedAt"`
	// What the prober reported at its last renewal.
	Owned      int     `json:"owned"`      // proxies it schedules
	Backlog    int     `json:"backlog"`    // of them, due and waiting for a free worker
	LagSeconds float64 `json:"lagSeconds"` // how late the oldest waiting one is
	// ProbePathDown: its echo endpoint does not answer it directly, so it judges no proxy.
	ProbePathDown bool `json:"probePathDown,omitempty"`
}

// ProberLag is the detail of a prober event: it fell behind its schedule (Reason
// ProberBehind) or caught up again (ProberCaughtUp).
type ProberLag struct {
	Worker      string  `json:"worker"`
	Owned       int     `json:"owned"`
	Backlog     int     `json:"backlog"`
	LagSeconds  float64 `json:"lagSeconds"`
	Concurrency int     `json:"concurrency"`
}

// Reasons of prober events.
const (
	ReasonProberBehind   Reason = "ProberBehind"
	ReasonProberCaughtUp Reason = "ProberCaughtUp"
	// ReasonProbePathDown: the prober cannot reach its own echo endpoint directly, so every
	// probe would fail whatever the proxies do; it records no failed probe until the path is
	// back (ReasonProbePathRestored).
	ReasonProbePathDown     Reason = "ProbePathDown"
	ReasonProbePathRestored Reason = "ProbePathRestored"
)

// Reasons of health events: the probers' verdict on a proxy turned.
const (
	ReasonHealthy   Reason = "Healthy"
	ReasonUnhealthy Reason = "Unhealthy"
)

// ReasonReport is the reason of a ProbeRequest the leaser sends when a crawler reports a
// proxy failed.
const ReasonReport Reason = "report"
