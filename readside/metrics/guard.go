package metrics

import (
	"context"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// The guard rails' gauges (docs/operations.md): instances against limits, creates against the
// rate, the proxies each rail holds back, and the groups the brake holds.
var (
	descLimitInstances = prometheus.NewDesc("egress_limit_instances", "Instances that may exist on a provider (a create was sent or one was reported), as the reconciler counts them against maxInstances.", []string{"provider"}, nil)
	descLimitMax       = prometheus.NewDesc("egress_limit_max_instances", "A provider's maxInstances, where it has one.", []string{"provider"}, nil)
	descLimitCreates   = prometheus.NewDesc("egress_limit_creates_last_minute", "Creates a provider's proxies began within the last minute, against its maxCreatesPerMinute.", []string{"provider"}, nil)
	descSuspect        = prometheus.NewDesc("egress_brake_suspect", "1 for a provider target (name provider/target) or a pool the brake holds: so many of its proxies are Unhealthy at once that none is replaced for health.", []string{"scope", "name"}, nil)
)

// collectGuards exports the guard rails of every provider that has proxies or a catalog
// record, each reason's waiting count at 0 when none waits, so an alert sees the series
// before the first one. Without the catalog the limits themselves are left out.
func (c *stateCollector) collectGuards(ctx context.Context, ch chan<- prometheus.Metric, rows []fleet.Row, fail func(string, error) bool) {
	catalogs, err := fleet.Catalogs(ctx, c.store.Catalog)
	if fail(events.BucketCatalog, err) {
		catalogs = nil
	}
	for _, g := range fleet.Guards(rows, catalogs, nil, time.Now()) {
		for _, reason := range fleet.HeldBackReasons {
			ch <- prometheus.MustNewConstMetric(descLimitWaiting, prometheus.GaugeValue, float64(g.Waiting[reason]), g.Provider, string(reason))
		}
		ch <- prometheus.MustNewConstMetric(descLimitInstances, prometheus.GaugeValue, float64(g.Instances), g.Provider)
		ch <- prometheus.MustNewConstMetric(descLimitCreates, prometheus.GaugeValue, float64(g.CreatesLastMinute), g.Provider)
		if g.MaxInstances > 0 {
			ch <- prometheus.MustNewConstMetric(descLimitMax, prometheus.GaugeValue, float64(g.MaxInstances), g.Provider)
		}
		for _, t := range g.Targets {
			if t.Suspect != nil {
				ch <- prometheus.MustNewConstMetric(descSuspect, prometheus.GaugeValue, 1, events.SuspectTarget, g.Provider+"/"+t.Target)
			}
		}
	}
	for pool := range fleet.SuspectPools(rows) {
		ch <- prometheus.MustNewConstMetric(descSuspect, prometheus.GaugeValue, 1, events.SuspectPool, pool)
	}
}
