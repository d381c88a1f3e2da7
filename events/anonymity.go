package events

// Anonymity is what a proxy reveals to the sites a crawler visits through it, judged by the
// probers from what their echo endpoint received, with the conventional meanings of proxy
// checkers: transparent, the client's address reaches the site; anonymous, a proxy is
// revealed (Via, Forwarded, X-Forwarded-For, ...) but not the client; elite, neither. ""
// is unknown (no echo reply yet, or a check URL that is not an echo endpoint).
type Anonymity string

// Anonymity verdicts, from least to most anonymous.
const (
	AnonymityTransparent Anonymity = "transparent"
	AnonymityAnonymous   Anonymity = "anonymous"
	AnonymityElite       Anonymity = "elite"
)

// Anonymities lists the verdicts from least to most anonymous.
var Anonymities = []Anonymity{AnonymityTransparent, AnonymityAnonymous, AnonymityElite}

// rank orders the verdicts; unknown ranks below every verdict.
func (a Anonymity) rank() int {
	switch a {
	case AnonymityTransparent:
		return 1
	case AnonymityAnonymous:
		return 2
	case AnonymityElite:
		return 3
	}
	return 0
}

// AtLeast reports whether a is known and at least as anonymous as min; every verdict, and
// unknown too, is at least "" (no requirement).
func (a Anonymity) AtLeast(min Anonymity) bool {
	return min == "" || a.rank() >= min.rank() && a.rank() > 0
}

// Least is the less anonymous of a and b, unknown when either is.
func Least(a, b Anonymity) Anonymity {
	if a.rank() == 0 || b.rank() == 0 {
		return ""
	}
	if a.rank() <= b.rank() {
		return a
	}
	return b
}

// Probe paths: how a crawler's request reaches a site through a proxy.
const (
	PathConnect = "connect" // a CONNECT tunnel (https); the proxy cannot add headers inside it
	PathForward = "forward" // a plain-HTTP request forwarded by the proxy, which may add headers
)

// PathCheck is what the echo endpoint saw of the last probe on one path.
type PathCheck struct {
	Path      string    `json:"path"`                // PathConnect or PathForward
	EgressIP  string    `json:"egressIp,omitempty"`  // the address the request came from
	Leaked    []string  `json:"leaked,omitempty"`    // names of the headers that reveal a proxy or the client
	Anonymity Anonymity `json:"anonymity,omitempty"` // this path's verdict
	Error     string    `json:"error,omitempty"`     // why this path gave no verdict (never a credential)
}

// Reasons of the anonymity and egress checks.
const (
	// ReasonHeaderLeak: the proxy is less anonymous than its spec's
	// healthCheck.requireAnonymity; it is Unhealthy and never leased.
	ReasonHeaderLeak Reason = "HeaderLeak"
	// ReasonEgressMismatch: traffic leaves from another address than the one expected (the
	// instance's own, or the external endpoint's expectedEgress); a warning, the proxy serves.
	ReasonEgressMismatch Reason = "EgressMismatch"
	// ReasonAnonymityChanged: a health event when a proxy's verdict changes.
	ReasonAnonymityChanged Reason = "AnonymityChanged"
)
