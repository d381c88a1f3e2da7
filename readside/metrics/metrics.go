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
	waiting       prometheus.Gauge
	waitTime      *prometheus.HistogramVec
	viewStill     *prometheus.GaugeVec
	viewReads     *prometheus.CounterVec
	probeTime     *prometheus.HistogramVec
	probeFailures prometheus.Counter
	probeDelay    prometheus.Histogram
	proberOwned   prometheus.Gauge
	proberBacklog prometheus.Gauge
	proberLag     prometheus.Gauge
	revocations   *prometheus.CounterVec
	revokedList   *prometheus.GaugeVec
	leaseKeys     *prometheus.GaugeVec
	masterPhase   *prometheus.GaugeVec
	boots         *prometheus.HistogramVec
	refusals      *refusalsCollector
	gateway       *gatewayMetrics
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
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egress_lease_waiting",
			Help: "Acquires this process's leaser holds until a slot frees (waitSeconds)."}),
		waitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_lease_wait_seconds",
			Help:    "How long waiting acquires waited, by outcome: granted, timed_out, gone (the caller left), stopped (the leaser stopped) or error.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 100}}, []string{"outcome"}),
		viewStill: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egress_lease_view_stands_still",
			Help: "1 while this process's leaser's view of a lease shard stands still (its watch echoes none of its writes) and it reads the shard directly (decision 100)."}, []string{"bucket"}),
		viewReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_lease_view_direct_reads_total",
			Help: "Batched direct reads of a lease shard's slots that this process's leaser made while its view of the shard stood still, by result (ok, error)."}, []string{"bucket", "result"}),
		probeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_probe_duration_seconds",
			Help:    "Duration of probes through proxies, by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"result"}),
		probeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "egress_probe_failures_total",
			Help: "Probes through proxies that failed."}),
		probeDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "egress_probe_delay_seconds",
			Help:    "How late probes started against their schedule (0 while the prober keeps up).",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		proberOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egress_prober_owned_proxies",
			Help: "Proxies this process's prober schedules (its share of the fleet)."}),
		proberBacklog: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egress_prober_backlog_proxies",
			Help: "Of them, proxies past their due time waiting for a free probe worker."}),
		proberLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egress_prober_lag_seconds",
			Help: "How late the oldest waiting probe of this process's prober is."}),
		revocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_lease_revocations_total",
			Help: "Lease revocations this process's leaser wrote (ok) or failed to write (error)."}, []string{"result"}),
		boots: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_proxy_boot_seconds",
			Help:    "Time from a proxy's spec to its first Ready, by provider, zone (the provider target it landed on) and image; observed by the reconciler leader.",
			Buckets: []float64{.5, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200}}, []string{"provider", "zone", "image"}),
		refusals: &refusalsCollector{sources: map[string]func() (map[string]int64, error){}},
		revokedList: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egress_lease_revocation_list_entries",
			Help: "Entries of the lease revocation list this process last delivered to a provider's proxies."}, []string{"provider"}),
		leaseKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egress_lease_keys_proxies",
			Help: "Lease-mode proxies of a provider whose keys derive from a lease master (by master ID), as this process last delivered them."}, []string{"provider", "master"}),
		masterPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egress_lease_master_phase",
			Help: "1 for the lease master rotation phase this process sees (steady, spreading, retiring), 0 for the others."}, []string{"phase"}),
	}
	m.Registry.MustRegister(m.ops, m.opDuration, m.gcDeletions, m.leaseRequests, m.acquireTime, m.waiting, m.waitTime, m.viewStill, m.viewReads, m.probeTime, m.probeFailures,
		m.probeDelay, m.proberOwned, m.proberBacklog, m.proberLag, m.revocations, m.revokedList, m.boots, m.refusals,
		m.leaseKeys, m.masterPhase,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.gateway = newGatewayMetrics(m.Registry)
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

// ObserveBoot records one proxy's boot, spec to first Ready (reconciler.BootObserver).
func (m *Metrics) ObserveBoot(provider, zone, image string, took time.Duration) {
	m.boots.WithLabelValues(provider, zone, image).Observe(took.Seconds())
}

// ObserveGC counts one orphan deletion (provisioner.Observer).
func (m *Metrics) ObserveGC(provider string) { m.gcDeletions.WithLabelValues(provider).Inc() }

// ObserveLease counts one lease request; acquire durations also feed the histogram, but for
// requests the HTTP face refused unread (a flood of bad tokens must not skew it).
func (m *Metrics) ObserveLease(endpoint, result string, d time.Duration) {
	m.leaseRequests.WithLabelValues(endpoint, result).Inc()
	if endpoint == "acquire" && result != "unauthorized" {
		m.acquireTime.Observe(d.Seconds())
	}
}

// ObserveWaiting counts acquires starting (+1) or ending (-1) a wait (leaser.WaitObserver).
func (m *Metrics) ObserveWaiting(delta int) { m.waiting.Add(float64(delta)) }

// ObserveWait records how long a waiting acquire waited and how it ended (leaser.WaitObserver).
func (m *Metrics) ObserveWait(outcome string, waited time.Duration) {
	m.waitTime.WithLabelValues(outcome).Observe(waited.Seconds())
}

// ObserveViewStill records whether the leaser's view of the lease shard bucket stands still
// (leaser.FreshnessObserver).
func (m *Metrics) ObserveViewStill(bucket string, still bool) {
	v := 0.0
	if still {
		v = 1
	}
	m.viewStill.WithLabelValues(bucket).Set(v)
}

// ObserveDirectRead counts one batched direct read of bucket's slots, "ok" or "error"
// (leaser.FreshnessObserver).
func (m *Metrics) ObserveDirectRead(bucket, result string) {
	m.viewReads.WithLabelValues(bucket, result).Inc()
}

// ObserveRevocation counts one lease revocation written ("ok") or not ("error") by the leaser.
func (m *Metrics) ObserveRevocation(result string) { m.revocations.WithLabelValues(result).Inc() }

// ObserveRevocationList records the size of the revocation list last delivered to provider.
func (m *Metrics) ObserveRevocationList(provider string, entries int) {
	m.revokedList.WithLabelValues(provider).Set(float64(entries))
}

// ObserveLeaseKeys records how many of provider's lease-mode proxies hold keys of each master
// (by ID), and the rotation phase this process sees (provisioner.LeaseKeys).
func (m *Metrics) ObserveLeaseKeys(provider, phase string, holders map[string]int) {
	m.leaseKeys.DeletePartialMatch(prometheus.Labels{"provider": provider})
	for id, n := range holders {
		m.leaseKeys.WithLabelValues(provider, id).Set(float64(n))
	}
	for _, p := range []string{"steady", "spreading", "retiring"} {
		v := 0.0
		if p == phase {
			v = 1
		}
		m.masterPhase.WithLabelValues(p).Set(v)
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

// ObserveProbeDelay records how late one probe started (prober.Observer).
func (m *Metrics) ObserveProbeDelay(d time.Duration) { m.probeDelay.Observe(d.Seconds()) }

// ObserveProberLoad sets the prober's share, backlog and lag (prober.Observer).
func (m *Metrics) ObserveProberLoad(owned, backlog int, lag time.Duration) {
	m.proberOwned.Set(float64(owned))
	m.proberBacklog.Set(float64(backlog))
	m.proberLag.Set(lag.Seconds())
}
