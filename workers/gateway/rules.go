package gateway

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/egressd/egressd/events"
)

// Rules say which answers mean the site blocked the proxy, and what a failure to get through
// the proxy means (docs/gateway.md#blocks). A hit is reported to the lease service for the
// target, so every crawler's next lease skips the proxy there.
type Rules struct {
	// BlockStatus are the origin's status codes that mean "blocked" (default 403, 429, 503).
	BlockStatus []int
	// BodyMarkers are byte strings whose presence in the first MarkerWindow bytes of a
	// plain-HTTP body means "blocked" (a captcha page served with 200). HTTPS bodies are
	// never read: a CONNECT stays a tunnel.
	BodyMarkers []string
	// ConnectFailure is the result reported when the fleet proxy cannot reach the target
	// (it refuses the CONNECT with 502/504, or a plain request through it fails):
	// events.ReportBlocked (default), events.ReportFailed, or "" to report nothing.
	// Not reaching the fleet proxy itself is always events.ReportFailed.
	ConnectFailure events.ReportResult
}

// MarkerWindow bounds how much of a plain-HTTP body is held back to look for a marker.
const MarkerWindow = 64 << 10

// DefaultRules are the rules without configuration.
func DefaultRules() Rules {
	return Rules{BlockStatus: []int{403, 429, 503}, ConnectFailure: events.ReportBlocked}
}

// ParseRules reads the flags' forms: status codes as a comma list ("" for none), markers as
// a list, the connect-failure result as blocked, failed or none.
func ParseRules(statuses string, markers []string, connectFailure string) (Rules, error) {
	var r Rules
	for _, s := range strings.Split(statuses, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return Rules{}, fmt.Errorf("block status %q: must be an HTTP status code, 100 to 599", s)
		}
		if !slices.Contains(r.BlockStatus, n) {
			r.BlockStatus = append(r.BlockStatus, n)
		}
	}
	for _, m := range markers {
		if m == "" || len(m) > MarkerWindow {
			return Rules{}, fmt.Errorf("block marker: must be 1 to %d bytes", MarkerWindow)
		}
		r.BodyMarkers = append(r.BodyMarkers, m)
	}
	switch connectFailure {
	case "blocked", "":
		r.ConnectFailure = events.ReportBlocked
	case "failed":
		r.ConnectFailure = events.ReportFailed
	case "none":
	default:
		return Rules{}, fmt.Errorf("connect failure %q: must be blocked, failed or none", connectFailure)
	}
	return r, nil
}

// hit is a rule's verdict on one answer.
type hit struct {
	result events.ReportResult // "" when no rule matched
	why    string              // which rule, for the log and the metrics
}

// status judges an origin's status code.
func (r Rules) status(code int) hit {
	if slices.Contains(r.BlockStatus, code) {
		return hit{events.ReportBlocked, "status " + strconv.Itoa(code)}
	}
	return hit{}
}

// body judges the start of a plain-HTTP body.
func (r Rules) body(head []byte) hit {
	for _, m := range r.BodyMarkers {
		if bytes.Contains(head, []byte(m)) {
			return hit{events.ReportBlocked, "body marker"}
		}
	}
	return hit{}
}

// unreachable is the verdict when the fleet proxy could not reach the target.
func (r Rules) unreachable() hit {
	if r.ConnectFailure == "" {
		return hit{}
	}
	return hit{r.ConnectFailure, "connect failure"}
}

// idempotent requests may be sent again on another proxy after a rule hit: their method says
// so (RFC 9110 §9.2.2) and they have no body to send twice.
func idempotent(method string, contentLength int64) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return contentLength == 0
	}
	return false
}
