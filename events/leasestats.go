package events

import "time"

// Lease statistics (EGRESS_LEASE_STATS). Every leaser replica sums what it did, per proxy and
// target, over an interval and publishes the sums once at its end: the durable history of the
// lease traffic costs one write per replica and interval, not one per lease cycle, and still
// answers what block analytics ask (leases and reports by target, proxy, provider and pool
// over a window). Raw lease events, for following one lease, stay on the short-lived
// EGRESS_LEASE_EVENTS.
const (
	StreamLeaseStats        = "EGRESS_LEASE_STATS"
	LeaseStatsSubjectPrefix = "egress.stats.lease"
	LeaseStatsSubjects      = LeaseStatsSubjectPrefix + ".>"
)

// LeaseStatsSubject is where the leaser replica member publishes its sums.
func LeaseStatsSubject(member string) string { return LeaseStatsSubjectPrefix + "." + member }

// LeaseStats is one replica's sums over [From, To). A replica with more rows than fit in one
// message publishes several with the same interval, numbered by Part (from 0).
type LeaseStats struct {
	V      int             `json:"v"`
	Leaser string          `json:"leaser"` // the replica's member ID
	From   time.Time       `json:"from"`
	To     time.Time       `json:"to"`
	Part   int             `json:"part,omitempty"`
	Rows   []LeaseStatsRow `json:"rows"`
}

// LeaseStatsRow is what happened to the leases of one proxy for one target (empty: leases
// asked without one, and reports naming none). Provider and Pool are the proxy's when the
// replica counted, so that a block rate by provider or pool still holds for proxies since
// deleted or rotated out.
type LeaseStatsRow struct {
	Proxy    string `json:"proxy"`
	Target   string `json:"target,omitempty"`
	Provider string `json:"provider,omitempty"`
	Pool     string `json:"pool,omitempty"`
	// Tier is, for leases granted in tiers, the tier they were granted on (1 is the first);
	// 0 (absent) without tiers.
	Tier int `json:"tier,omitempty"`
	LeaseCounts
}

// LeaseCounts counts lease cycles and reports. A lease's target is the one it was asked
// for; a report's is the one it names.
type LeaseCounts struct {
	Granted  int `json:"granted,omitempty"`
	Renewed  int `json:"renewed,omitempty"`
	Released int `json:"released,omitempty"`
	Expired  int `json:"expired,omitempty"`
	Ended    int `json:"ended,omitempty"` // ended by the service: the proxy was deleted or replaced
	OK       int `json:"ok,omitempty"`    // reports
	Blocked  int `json:"blocked,omitempty"`
	Failed   int `json:"failed,omitempty"`
	// Tier moves (docs/leases.md#tiers): blocked reports that moved their target up from
	// this tier, and grants that probed a target down to it after a quiet period.
	TierUp   int `json:"tierUp,omitempty"`
	TierDown int `json:"tierDown,omitempty"`
}

// Add adds o to c.
func (c *LeaseCounts) Add(o LeaseCounts) {
	c.Granted += o.Granted
	c.Renewed += o.Renewed
	c.Released += o.Released
	c.Expired += o.Expired
	c.Ended += o.Ended
	c.OK += o.OK
	c.Blocked += o.Blocked
	c.Failed += o.Failed
	c.TierUp += o.TierUp
	c.TierDown += o.TierDown
}

// Reports is the number of reports counted.
func (c LeaseCounts) Reports() int { return c.OK + c.Blocked + c.Failed }

// BlockRate is the share of reports that were blocked, 0 without reports.
func (c LeaseCounts) BlockRate() float64 {
	if n := c.Reports(); n > 0 {
		return float64(c.Blocked) / float64(n)
	}
	return 0
}

// CountLease counts a lease event's reason; false for a reason that is not one.
func (c *LeaseCounts) CountLease(r Reason) bool {
	switch r {
	case ReasonGranted:
		c.Granted++
	case ReasonRenewed:
		c.Renewed++
	case ReasonReleased:
		c.Released++
	case ReasonExpired:
		c.Expired++
	case ReasonProxyDeleted, ReasonProxyReplaced:
		c.Ended++
	default:
		return false
	}
	return true
}

// CountReport counts a report's result; false for a result that is not one.
func (c *LeaseCounts) CountReport(r ReportResult) bool {
	switch r {
	case ReportOK:
		c.OK++
	case ReportBlocked:
		c.Blocked++
	case ReportFailed:
		c.Failed++
	default:
		return false
	}
	return true
}

// RawLeaseEvents says which lease events a leaser also publishes one by one on
// EGRESS_LEASE_EVENTS, besides counting them all in its statistics.
type RawLeaseEvents string

// Raw lease event modes. Reports are always published: the pool controller recycles a
// proxy on its blocked reports, and a report already costs a cooldown write.
const (
	// RawAll: grants, renewals, ends (released, expired, ended by the service) and reports.
	RawAll RawLeaseEvents = "all"
	// RawEnds: a lease's end, which carries when it was acquired, holder, target and
	// expiry, so one event tells a lease's story; and reports. The default.
	RawEnds RawLeaseEvents = "ends"
	// RawReports: reports only; lease cycles are only counted.
	RawReports RawLeaseEvents = "reports"
)

// RawLeaseEventModes lists the modes, the default first.
var RawLeaseEventModes = []RawLeaseEvents{RawEnds, RawAll, RawReports}

// Publishes tells whether a lease event with reason r is published one by one in mode m.
func (m RawLeaseEvents) Publishes(r Reason) bool {
	switch m {
	case RawAll:
		return true
	case RawReports:
		return false
	default: // RawEnds and ""
		return r != ReasonGranted && r != ReasonRenewed
	}
}
