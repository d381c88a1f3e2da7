package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gatewayMetrics count the gateway role's requests per holder (the crawler its token proved)
// and pool (the pool its username asked for, "" for none). Holders are bounded by the
// configured crawlers; pools are what authenticated crawlers ask for.
type gatewayMetrics struct {
	requests *prometheus.CounterVec
	hits     *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newGatewayMetrics(reg *prometheus.Registry) *gatewayMetrics {
	g := &gatewayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_gateway_requests_total",
			Help: "Gateway requests (kind http) and tunnels (kind connect), by holder, pool and result: ok, blocked and failed (a block rule hit, reported), upstream_error, refused, unauthorized."},
			[]string{"holder", "pool", "kind", "result"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_gateway_blocks_total",
			Help: "Block rule hits the gateway reported to the lease service, by holder, pool and result (blocked, failed), retried or not."},
			[]string{"holder", "pool", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_gateway_bytes_total",
			Help: "Bytes the gateway relayed, by holder, pool and direction (up: crawler to site, down: site to crawler)."},
			[]string{"holder", "pool", "direction"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_gateway_request_duration_seconds",
			Help:    "Time from a gateway request's arrival to its end (a tunnel's whole life for connect).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}},
			[]string{"holder", "pool", "kind"}),
	}
	reg.MustRegister(g.requests, g.hits, g.bytes, g.duration)
	return g
}

// ObserveGatewayRequest counts one gateway request (gateway.Observer).
func (m *Metrics) ObserveGatewayRequest(holder, pool, kind, result string, up, down int64, d time.Duration) {
	g := m.gateway
	g.requests.WithLabelValues(holder, pool, kind, result).Inc()
	if up > 0 {
		g.bytes.WithLabelValues(holder, pool, "up").Add(float64(up))
	}
	if down > 0 {
		g.bytes.WithLabelValues(holder, pool, "down").Add(float64(down))
	}
	if result != "unauthorized" {
		g.duration.WithLabelValues(holder, pool, kind).Observe(d.Seconds())
	}
}

// ObserveGatewayHit counts one rule hit the gateway reported (gateway.Observer).
func (m *Metrics) ObserveGatewayHit(holder, pool, result string) {
	m.gateway.hits.WithLabelValues(holder, pool, result).Inc()
}
