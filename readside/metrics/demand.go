package metrics

import (
	"maps"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/prometheus/client_golang/prometheus"
)

// The demand the leasers measure (pool_demand), per scope: a pool, or a selector that matches
// no pool (pool "", its pairs in selector). Usable by a KEDA or HPA Prometheus trigger to scale
// other things by it; the pool controller's own autoscale reads the same records.
var (
	demandLabels       = []string{"pool", "selector"}
	descDemandHeld     = prometheus.NewDesc("egress_pool_demand_held", "Lease slots held on a pool's members (or a selector's proxies), as the leasers see them.", demandLabels, nil)
	descDemandWaiting  = prometheus.NewDesc("egress_pool_demand_waiting", "Acquires waiting for a free proxy now, summed over the leasers.", demandLabels, nil)
	descDemandRefused  = prometheus.NewDesc("egress_pool_demand_refused", "Acquires refused for want of a free proxy within the leasers' window (a holder once however often it retried), summed over the leasers.", demandLabels, nil)
	descDemandGrants   = prometheus.NewDesc("egress_pool_demand_grants_per_second", "Leases granted per second over the leasers' window, summed over the leasers.", demandLabels, nil)
	descDemandLeasers  = prometheus.NewDesc("egress_pool_demand_leasers", "Leaser replicas whose demand records are live for the scope.", demandLabels, nil)
	descAutoscaleWant  = prometheus.NewDesc("egress_pool_autoscale_wanted", "Members the demand asks for at the target utilization, within min and max (pools with autoscale).", []string{"pool"}, nil)
	descAutoscaleLimit = prometheus.NewDesc("egress_pool_autoscale_limit", "A pool's autoscale bounds, by bound (min or max).", []string{"pool", "bound"}, nil)
	demandDescs        = []*prometheus.Desc{descDemandHeld, descDemandWaiting, descDemandRefused, descDemandGrants, descDemandLeasers, descAutoscaleWant, descAutoscaleLimit}
)

// collectDemand exports every scope's demand, in scope order.
func collectDemand(ch chan<- prometheus.Metric, demand map[string]events.DemandSum) {
	for _, scope := range slices.Sorted(maps.Keys(demand)) {
		d := demand[scope]
		pool, sel := scope, ""
		if events.IsSelectorScope(scope) {
			pool, sel = "", selectorLabel(d.Selector)
		}
		for _, m := range []struct {
			desc *prometheus.Desc
			v    float64
		}{{descDemandHeld, float64(d.Held)}, {descDemandWaiting, float64(d.Waiting)}, {descDemandRefused, float64(d.Refused)},
			{descDemandGrants, d.GrantsPerSecond}, {descDemandLeasers, float64(d.Leasers)}} {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.v, pool, sel)
		}
	}
}

// selectorLabel is a selector as k=v pairs in key order, joined with commas.
func selectorLabel(sel map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(sel)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + sel[k])
	}
	return b.String()
}
