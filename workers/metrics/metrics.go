package metrics

import (
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is one process's registry.
type Metrics struct {
	Registry *prometheus.Registry

	ops           *prometheus.CounterVec
	opDuration    *prometheus.HistogramVec
	gcDeletions   *prometheus.CounterVec
	leaseRequests *prometheus.CounterVec
	acquireTime   prometheus.Histogram
	probeTime     *prometheus.HistogramVec
	probeFailures prometheus.Counter
}

// New registers the process's metrics. With state, every scrape also reads egressd's state
// from NATS (buckets, streams, consumers), which needs read rights on all of them; the NATS
// client's own statistics are always exported.
func New(store *kvstore.Store, nc *nats.Conn, state bool) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_provider_ops_total",
			Help: "Provider operations run by this process, by provider, op and result class."}, []string{"provider", "op", "result"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_provider_op_duration_seconds",
			Help:    "Duration of provider operations.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}}, []string{"provider", "op"}),
		gcDeletions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_gc_deletions_total",
			Help: "Orphans deleted by this process's garbage collector."}, []string{"provider"}),
		leaseRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_lease_requests_total",
			Help: "Lease service requests handled by this process, by endpoint and result."}, []string{"endpoint", "result"}),
		acquireTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "egress_lease_acquire_duration_seconds",
			Help:    "Time to answer a lease acquire, granted or not.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}),
		probeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_probe_duration_seconds",
			Help:    "Duration of probes through proxies, by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"result"}),
		probeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "egress_probe_failures_total",
			Help: "Probes through proxies that failed."}),
	}
	m.Registry.MustRegister(m.ops, m.opDuration, m.gcDeletions, m.leaseRequests, m.acquireTime, m.probeTime, m.probeFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sc := &stateCollector{store: store, nc: nc, timeout: 5 * time.Second}
	if state {
		m.Registry.MustRegister(sc)
	} else {
		m.Registry.MustRegister(clientCollector{sc})
	}
	return m
}

// ObserveOp counts one provider op (provisioner.Observer).
func (m *Metrics) ObserveOp(provider, op, result string, d time.Duration) {
	if result == "" {
		result = "ok"
	}
	m.ops.WithLabelValues(provider, op, result).Inc()
	m.opDuration.WithLabelValues(provider, op).Observe(d.Seconds())
}

// ObserveGC counts one orphan deletion (provisioner.Observer).
func (m *Metrics) ObserveGC(provider string) { m.gcDeletions.WithLabelValues(provider).Inc() }

// ObserveLease counts one lease request; acquire durations also feed the histogram.
func (m *Metrics) ObserveLease(endpoint, result string, d time.Duration) {
	m.leaseRequests.WithLabelValues(endpoint, result).Inc()
	if endpoint == "acquire" {
		m.acquireTime.Observe(d.Seconds())
	}
}

// ObserveProbe records one probe.
func (m *Metrics) ObserveProbe(ok bool, d time.Duration) {
	result := "ok"
	if !ok {
		result = "failed"
		m.probeFailures.Inc()
	}
	m.probeTime.WithLabelValues(result).Observe(d.Seconds())
}
