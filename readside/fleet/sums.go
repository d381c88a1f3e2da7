package fleet

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// StatsKey groups rows: the zero fields are summed over.
type StatsKey struct {
	Proxy, Target, Provider, Pool string
}

// StatsBy is what a sum groups by.
type StatsBy func(events.LeaseStatsRow) StatsKey

// Groupings of SumLeaseStats.
var (
	ByProxyTarget StatsBy = func(r events.LeaseStatsRow) StatsKey { return StatsKey{Proxy: r.Proxy, Target: r.Target} }
	ByTarget      StatsBy = func(r events.LeaseStatsRow) StatsKey { return StatsKey{Target: r.Target} }
	ByProxy       StatsBy = func(r events.LeaseStatsRow) StatsKey {
		return StatsKey{Proxy: r.Proxy, Provider: r.Provider, Pool: r.Pool}
	}
	ByProvider StatsBy = func(r events.LeaseStatsRow) StatsKey { return StatsKey{Provider: r.Provider} }
	ByPool     StatsBy = func(r events.LeaseStatsRow) StatsKey { return StatsKey{Pool: r.Pool} }
)

// StatsSum is the counts of one group.
type StatsSum struct {
	StatsKey
	events.LeaseCounts
}

// SumLeaseStats sums every replica's rows of the window by, sorted by key.
func SumLeaseStats(ctx context.Context, js jetstream.JetStream, from, to time.Time, by StatsBy) ([]StatsSum, error) {
	sums := NewStatsSums(by)
	err := kvstore.ReadLeaseStats(ctx, js, from, to, func(s events.LeaseStats) {
		for _, r := range s.Rows {
			sums.Add(r)
		}
	})
	if err != nil {
		return nil, err
	}
	return sums.Sorted(), nil
}

// StatsSums sums rows by a grouping as they are read: what SumLeaseStats does, for a reader
// that builds more than the sums from one read of the window (a time series beside them).
type StatsSums struct {
	by   StatsBy
	sums map[StatsKey]*events.LeaseCounts
}

// NewStatsSums sums by by.
func NewStatsSums(by StatsBy) *StatsSums {
	return &StatsSums{by: by, sums: map[StatsKey]*events.LeaseCounts{}}
}

// Add counts r in its group.
func (s *StatsSums) Add(r events.LeaseStatsRow) {
	k := s.by(r)
	c := s.sums[k]
	if c == nil {
		c = &events.LeaseCounts{}
		s.sums[k] = c
	}
	c.Add(r.LeaseCounts)
}

// Sorted is the sums so far, sorted by key.
func (s *StatsSums) Sorted() []StatsSum {
	out := make([]StatsSum, 0, len(s.sums))
	for _, k := range slices.SortedFunc(maps.Keys(s.sums), func(a, b StatsKey) int {
		return cmp.Or(cmp.Compare(a.Proxy, b.Proxy), cmp.Compare(a.Target, b.Target),
			cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Pool, b.Pool))
	}) {
		out = append(out, StatsSum{StatsKey: k, LeaseCounts: *s.sums[k]})
	}
	return out
}
