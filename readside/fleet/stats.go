package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Block analytics: the leasers' sums on EGRESS_LEASE_STATS over a window, grouped and sorted
// the one way `egressd stats`, /api/stats.json and the status page's chart all show them.

// StatsGroup is what the sums are grouped by.
type StatsGroup string

// Groupings of the statistics.
const (
	StatsByTarget   StatsGroup = "target"
	StatsByProxy    StatsGroup = "proxy"
	StatsByProvider StatsGroup = "provider"
	StatsByPool     StatsGroup = "pool"
)

// StatsGroups lists the groupings, the default first.
var StatsGroups = []StatsGroup{StatsByTarget, StatsByProxy, StatsByProvider, StatsByPool}

// StatsSort is the order of the rows.
type StatsSort string

// Orders of the rows; ties go to the more blocked, then the more reported, then the key.
const (
	SortByRate    StatsSort = "rate"    // highest block rate first
	SortByBlocked StatsSort = "blocked" // most blocked reports first
)

// StatsSorts lists the orders, the default first.
var StatsSorts = []StatsSort{SortByRate, SortByBlocked}

// Defaults and bounds of a StatsQuery.
const (
	DefaultStatsWindow = time.Hour
	DefaultStatsTop    = 20
	// maxStatsWindow is EGRESS_LEASE_STATS's default retention, and more than it keeps
	// unless events.stats.maxAge raises it.
	maxStatsWindow = 366 * 24 * time.Hour
	// seriesPoints is how many buckets a series has at most: enough for a chart 1,200
	// pixels wide to show its shape, few enough to stay small as JSON.
	seriesPoints = 60
	maxTop       = 10000
)

// StatsQuery is a checked request for statistics.
type StatsQuery struct {
	Since time.Duration // the window ends now and began this long ago
	By    StatsGroup
	Sort  StatsSort
	Top   int // at most this many rows; 0: all
	// Only rows of these targets, proxies, providers and pools (exact; none: all). They
	// apply to the total and the series too.
	Targets, Proxies, Providers, Pools []string
	// Step is the series' bucket; 0 picks the window over 60, and at least the longest
	// interval read (a bucket narrower than an interval would show gaps between them).
	Step time.Duration
}

// StatsInput is a query as written on a command line or in a URL; ParseStatsQuery checks it.
type StatsInput struct {
	Since, By, Sort, Top, Step         string
	Targets, Proxies, Providers, Pools []string // each may be comma-separated
}

// ParseStatsQuery checks in; its error names the field at fault.
func ParseStatsQuery(in StatsInput) (StatsQuery, error) {
	q := StatsQuery{Since: DefaultStatsWindow, By: StatsByTarget, Sort: SortByRate, Top: DefaultStatsTop,
		Targets: splitValues(in.Targets), Proxies: splitValues(in.Proxies), Providers: splitValues(in.Providers), Pools: splitValues(in.Pools)}
	if in.Since != "" {
		d, err := parseWindow(in.Since)
		if err != nil || d <= 0 || d > maxStatsWindow {
			return q, fmt.Errorf("since %q: want a duration from 1s to 366d, such as 15m, 1h or 7d", in.Since)
		}
		q.Since = d
	}
	if in.By != "" {
		q.By = StatsGroup(in.By)
		if !slices.Contains(StatsGroups, q.By) {
			return q, fmt.Errorf("by %q: want target, proxy, provider or pool", in.By)
		}
	}
	if in.Sort != "" {
		q.Sort = StatsSort(in.Sort)
		if !slices.Contains(StatsSorts, q.Sort) {
			return q, fmt.Errorf("sort %q: want rate or blocked", in.Sort)
		}
	}
	if in.Top != "" {
		n, err := strconv.Atoi(in.Top)
		if err != nil || n < 0 || n > maxTop {
			return q, fmt.Errorf("top %q: want a whole number from 0 (all) to %d", in.Top, maxTop)
		}
		q.Top = n
	}
	if in.Step != "" {
		d, err := parseWindow(in.Step)
		if err != nil || d < time.Second || d > q.Since {
			return q, fmt.Errorf("step %q: want a duration from 1s to the window (%s)", in.Step, q.Since)
		}
		q.Step = d
	}
	return q, nil
}

// parseWindow is time.ParseDuration that also takes whole days ("7d").
func parseWindow(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		if n < 0 || n > 1000 { // beyond any window, and before 24h times it could overflow
			return 0, fmt.Errorf("%d days: out of range", n)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func splitValues(vals []string) []string {
	var out []string
	for _, v := range vals {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// StatsRow is the counts of one group. Key is the group's target, proxy, provider or pool,
// "" for none (leases asked without a target, a proxy of no pool).
type StatsRow struct {
	Key      string `json:"key"`
	Provider string `json:"provider,omitempty"` // grouped by proxy: its provider and pool
	Pool     string `json:"pool,omitempty"`
	// Leases is the leases granted; Reports the ok, blocked and failed reports.
	Leases    int     `json:"leases"`
	Reports   int     `json:"reports"`
	OK        int     `json:"ok"`
	Blocked   int     `json:"blocked"`
	Failed    int     `json:"failed"`
	BlockRate float64 `json:"blockRate"` // Blocked / Reports, 0 without reports
}

func statsRow(key string, c events.LeaseCounts) StatsRow {
	return StatsRow{Key: key, Leases: c.Granted, Reports: c.Reports(), OK: c.OK, Blocked: c.Blocked, Failed: c.Failed, BlockRate: c.BlockRate()}
}

// Stats is what a window of statistics says.
type Stats struct {
	From  time.Time  `json:"from"` // the window: records stored from From to To
	To    time.Time  `json:"to"`
	By    StatsGroup `json:"by"`
	Sort  StatsSort  `json:"sort"`
	Total StatsRow   `json:"total"` // every row the filters keep, Top or not
	Rows  []StatsRow `json:"rows"`
	// More is how many rows Top left out.
	More int `json:"more"`
	// Records is how many leaser records the window held; 0 means no statistics yet.
	Records int `json:"records"`
	// IntervalSeconds is the longest interval among them: how far behind now the newest
	// sums may be (a sum is stored when its interval ends).
	IntervalSeconds int    `json:"intervalSeconds"`
	Series          Series `json:"series"`
}

// Series is leases granted and blocked reports per provider over the window, in buckets of
// Step by the end of each record's interval.
type Series struct {
	StepSeconds int              `json:"stepSeconds"`
	Starts      []time.Time      `json:"starts"` // the start of every bucket
	Providers   []ProviderSeries `json:"providers"`
}

// ProviderSeries is one provider's counts, one per bucket; Provider "" is proxies whose
// provider the leaser did not know.
type ProviderSeries struct {
	Provider string `json:"provider"`
	Leases   []int  `json:"leases"`
	Blocked  []int  `json:"blocked"`
}

// groupings maps a StatsGroup to the kvstore sum it is.
var groupings = map[StatsGroup]StatsBy{
	StatsByTarget: ByTarget, StatsByProxy: ByProxy, StatsByProvider: ByProvider, StatsByPool: ByPool,
}

// recordPoint is one record's contribution to the series.
type recordPoint struct {
	to      time.Time
	leases  map[string]int // by provider
	blocked map[string]int
}

// LoadStats reads the window of q ending at now from EGRESS_LEASE_STATS, once, and sums it
// for the rows and the series. A stream not declared yet reads as no statistics.
func LoadStats(ctx context.Context, js jetstream.JetStream, q StatsQuery, now time.Time) (*Stats, error) {
	from := now.Add(-q.Since)
	st := &Stats{From: from, To: now, By: q.By, Sort: q.Sort, Rows: []StatsRow{}}
	sums := NewStatsSums(groupings[q.By])
	var total events.LeaseCounts
	var points []recordPoint
	var longest time.Duration
	err := kvstore.ReadLeaseStats(ctx, js, from, now, func(s events.LeaseStats) {
		st.Records++
		longest = max(longest, s.To.Sub(s.From))
		p := recordPoint{to: s.To, leases: map[string]int{}, blocked: map[string]int{}}
		for _, r := range s.Rows {
			if !q.keeps(r) {
				continue
			}
			sums.Add(r)
			total.Add(r.LeaseCounts)
			p.leases[r.Provider] += r.Granted
			p.blocked[r.Provider] += r.Blocked
		}
		points = append(points, p)
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	st.IntervalSeconds = int(longest.Round(time.Second) / time.Second)
	st.Total = statsRow("", total)
	for _, s := range sums.Sorted() {
		r := statsRow(keyOf(q.By, s.StatsKey), s.LeaseCounts)
		if q.By == StatsByProxy {
			r.Provider, r.Pool = s.Provider, s.Pool
		}
		st.Rows = append(st.Rows, r)
	}
	slices.SortStableFunc(st.Rows, q.compare)
	if q.Top > 0 && len(st.Rows) > q.Top {
		st.More = len(st.Rows) - q.Top
		st.Rows = st.Rows[:q.Top]
	}
	st.Series = series(points, from, q.Since, cmp.Or(q.Step, max(q.Since/seriesPoints, longest)))
	return st, nil
}

func (q StatsQuery) keeps(r events.LeaseStatsRow) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	return in(q.Targets, r.Target) && in(q.Proxies, r.Proxy) && in(q.Providers, r.Provider) && in(q.Pools, r.Pool)
}

func keyOf(by StatsGroup, k StatsKey) string {
	switch by {
	case StatsByProxy:
		return k.Proxy
	case StatsByProvider:
		return k.Provider
	case StatsByPool:
		return k.Pool
	}
	return k.Target
}

// compare orders rows by q.Sort, then by the other measure, then by reports, then by key, so
// the order is the same on every read.
func (q StatsQuery) compare(a, b StatsRow) int {
	rate, blocked := cmp.Compare(b.BlockRate, a.BlockRate), cmp.Compare(b.Blocked, a.Blocked)
	first, second := rate, blocked
	if q.Sort == SortByBlocked {
		first, second = blocked, rate
	}
	return cmp.Or(first, second, cmp.Compare(b.Reports, a.Reports), cmp.Compare(a.Key, b.Key))
}

// series buckets the points by the end of their interval; a point outside the window (a
// replica's clock ahead or behind the server's) goes to the nearest bucket.
func series(points []recordPoint, from time.Time, window, step time.Duration) Series {
	step = max(step.Round(time.Second), time.Second)
	n := max(int((window+step-1)/step), 1)
	s := Series{StepSeconds: int(step / time.Second), Starts: make([]time.Time, n), Providers: []ProviderSeries{}}
	for i := range n {
		s.Starts[i] = from.Add(time.Duration(i) * step)
	}
	byProvider := map[string]*ProviderSeries{}
	for _, p := range points {
		i := min(max(int(p.to.Sub(from)/step), 0), n-1)
		for _, prov := range slices.Sorted(maps.Keys(p.leases)) {
			ps := byProvider[prov]
			if ps == nil {
				ps = &ProviderSeries{Provider: prov, Leases: make([]int, n), Blocked: make([]int, n)}
				byProvider[prov] = ps
			}
			ps.Leases[i] += p.leases[prov]
			ps.Blocked[i] += p.blocked[prov]
		}
	}
	for _, prov := range slices.Sorted(maps.Keys(byProvider)) {
		s.Providers = append(s.Providers, *byProvider[prov])
	}
	return s
}

// RateText is the block rate with one decimal, "75.0%"; "-" without reports, where there is
// no rate.
func (r StatsRow) RateText() string {
	if r.Reports == 0 {
		return "-"
	}
	return strconv.FormatFloat(r.BlockRate*100, 'f', 1, 64) + "%"
}

// FormatWindow prints a duration the way a window is written: 1h, 90m, 7d, 5s.
func FormatWindow(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}
