package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// refusalsDesc is the lease tokens (and other credentials) a provider's proxies refused.
var refusalsDesc = prometheus.NewDesc("egress_lease_tokens_refused_total",
	"Credentials the provider's proxies refused since each started, by reason: revoked, expired, instance, key, signature, malformed, credentials.",
	[]string{"provider", "reason"}, nil)

// refusalsCollector reads the refusal counts of the providers that keep them, at scrape time.
type refusalsCollector struct {
	mu      sync.Mutex
	sources map[string]func() (map[string]int64, error) // by provider
}

func (c *refusalsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusalsDesc }

func (c *refusalsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for provider, read := range c.sources {
		counts, err := read()
		if err != nil {
			continue // nothing rather than a wrong number; the proxies keep counting
		}
		for reason, n := range counts {
			ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(n), provider, reason)
		}
	}
}

// RegisterRefusals exports the refusal counts of provider's proxies, read by read at every
// scrape (the local provider sums its proxies' files).
func (m *Metrics) RegisterRefusals(provider string, read func() (map[string]int64, error)) {
	m.refusals.mu.Lock()
	defer m.refusals.mu.Unlock()
	m.refusals.sources[provider] = read
}
