package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descProxies      = prometheus.NewDesc("egress_proxies", "Proxies by provider and phase.", []string{"provider", "phase"}, nil)
	descHealthy      = prometheus.NewDesc("egress_proxies_healthy", "Proxies with a current healthy verdict at the address they have now.", nil, nil)
	descAnonymity    = prometheus.NewDesc("egress_proxies_anonymity", "Proxies with an address by the probers' anonymity verdict on it: elite, anonymous, transparent or unknown.", []string{"anonymity"}, nil)
	descOverdue      = prometheus.NewDesc("egress_proxies_probe_overdue", "Proxies whose last probe at their current address is overdue, by provider.", []string{"provider"}, nil)
	descLeases       = prometheus.NewDesc("egress_leases_active", "Active lease slots, from proxy_leases.", nil, nil)
	descInFlight     = prometheus.NewDesc("egress_host_ops_in_flight", "Ops delivered to a provisioner and not yet settled, per host (the consumer's ack-pending count).", []string{"provider", "host"}, nil)
	descPending      = prometheus.NewDesc("egress_host_ops_pending", "Ops waiting for a provisioner, per host.", []string{"provider", "host"}, nil)
	descTargetUp     = prometheus.NewDesc("egress_provider_target_up", "1 when the provider target's last check was ready, from provider_health.", []string{"provider", "target"}, nil)
	descCheckTime    = prometheus.NewDesc("egress_provider_check_duration_seconds", "Duration of the provider target's last check.", []string{"provider", "target"}, nil)
	descStreamMsgs   = prometheus.NewDesc("egress_jetstream_messages", "Messages stored in a JetStream stream.", []string{"stream"}, nil)
	descStreamBytes  = prometheus.NewDesc("egress_jetstream_bytes", "Bytes stored in a JetStream stream.", []string{"stream"}, nil)
	descConsumers    = prometheus.NewDesc("egress_jetstream_consumers", "Consumers of a JetStream stream.", []string{"stream"}, nil)
	descNATSIn       = prometheus.NewDesc("egress_nats_client_in_messages_total", "Messages this process received from NATS.", nil, nil)
	descNATSOut      = prometheus.NewDesc("egress_nats_client_out_messages_total", "Messages this process sent to NATS.", nil, nil)
	descNATSInBytes  = prometheus.NewDesc("egress_nats_client_in_bytes_total", "Bytes this process received from NATS.", nil, nil)
	descNATSOutBytes = prometheus.NewDesc("egress_nats_client_out_bytes_total", "Bytes this process sent to NATS.", nil, nil)
	descReconnects   = prometheus.NewDesc("egress_nats_client_reconnects_total", "Reconnections of this process to NATS.", nil, nil)
	descConnected    = prometheus.NewDesc("egress_nats_client_connected", "1 while this process is connected to NATS.", nil, nil)
	descPoolDesired  = prometheus.NewDesc("egress_pool_desired", "Members a pool's spec asks for (replicas), from pools.", []string{"pool"}, nil)
	descPoolMembers  = prometheus.NewDesc("egress_pool_members", "Proxies a pool owns now, draining ones included.", []string{"pool"}, nil)
	descPoolReady    = prometheus.NewDesc("egress_pool_ready", "A pool's members in phase Ready and not draining.", []string{"pool"}, nil)
	descPoolLeased   = prometheus.NewDesc("egress_pool_leased", "Lease slots held on a pool's members.", []string{"pool"}, nil)
	descPoolDraining = prometheus.NewDesc("egress_pool_draining", "A pool's members that are draining: no new leases, held ones run on.", []string{"pool"}, nil)
	descPoolInfo     = prometheus.NewDesc("egress_pool_info", "1 for every pool, labelled with its phase.", []string{"pool", "phase"}, nil)
	descLimitWaiting = prometheus.NewDesc("egress_limit_waiting_proxies", "Proxies whose create a guard rail holds back, by provider and reason: LimitReached (maxInstances), RateLimited (maxCreatesPerMinute), ProviderUnhealthy (a failing target).", []string{"provider", "reason"}, nil)
	descQuarantine   = prometheus.NewDesc("egress_quarantine_addresses", "Addresses in quarantine (address_quarantine), by the pool whose burned member left them: kept from new instances until their quarantine ends.", []string{"pool"}, nil)
	descScrapeErrors = prometheus.NewDesc("egress_scrape_errors", "Sources that could not be read during this scrape.", []string{"source"}, nil)
)

// modelMaxAge is how long one build of the read model serves scrapes: several Prometheis, or
// one with a short interval, then cost one read of the fleet per second at most.
const modelMaxAge = time.Second

// stateCollector reads egressd's state from NATS on every scrape.
type stateCollector struct {
	store   *kvstore.Store
	nc      *nats.Conn
	timeout time.Duration

	// mu is held while the model is built, so concurrent scrapes wait for one build and
	// share it instead of each reading the fleet; the build is bounded by timeout.
	mu      sync.Mutex
	model   *fleet.Fleet
	modelAt time.Time
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProxies, descLimitWaiting, descHealthy, descAnonymity, descOverdue, descLeases, descInFlight, descPending, descTargetUp,
		descCheckTime, descStreamMsgs, descStreamBytes, descConsumers, descNATSIn, descNATSOut, descNATSInBytes, descNATSOutBytes,
		descReconnects, descConnected, descPoolDesired, descPoolMembers, descPoolReady, descPoolLeased, descPoolDraining, descPoolInfo,
		descLimitInstances, descLimitMax, descLimitCreates, descSuspect, descQuarantine, descScrapeErrors} {
		ch <- d
	}
	for _, d := range demandDescs {
		ch <- d
	}
}

// fleet returns the read model, built at most modelMaxAge ago.
func (c *stateCollector) fleet(ctx context.Context) *fleet.Fleet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.model == nil || time.Since(c.modelAt) >= modelMaxAge {
		c.model = fleet.Load(ctx, fleet.FromStore(c.store), time.Now())
		c.modelAt = time.Now()
	}
	return c.model
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.collectClient(ch)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	failed := map[string]bool{}
	fail := func(source string, err error) bool {
		if err != nil {
			failed[source] = true
		}
		return err != nil
	}
	fl := c.fleet(ctx)
	for _, e := range fl.Errors {
		failed[e.Bucket] = true
	}
	// Phases need specs (a spec without a status is Pending) and statuses; health and
	// overdue judgements also need the health records and the specs' probe intervals. A
	// partial read would export wrong numbers, so those gauges are left out instead.
	if !failed[events.BucketProxies] && !failed[events.BucketStatus] {
		collectPhases(ch, fl.Rows)
		if !failed[events.BucketHealth] {
			ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, float64(fl.Totals.Healthy))
			collectAnonymity(ch, fl.Totals.Anonymity)
			collectOverdue(ch, fl.Rows)
			c.collectGuards(ctx, ch, fl.Rows, fail)
		}
	}
	if !failed[events.BucketLeases] {
		ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(fl.Totals.Leases))
	}
	collectPools(ch, fl.Pools, failed)
	if !failed[events.BucketPoolDemand] {
		collectDemand(ch, fl.Demand)
	}
	if targets, err := fleet.Targets(ctx, c.store.Providers); !fail(events.BucketProviderHealth, err) {
		for _, th := range targets {
			up := 0.0
			if th.Ready {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descTargetUp, prometheus.GaugeValue, up, th.Provider, th.Target)
			ch <- prometheus.MustNewConstMetric(descCheckTime, prometheus.GaugeValue, th.LatencyMs/1000, th.Provider, th.Target)
		}
	}
	if q, err := fleet.Quarantine(ctx, c.store.Quarantine, time.Now()); !fail(events.BucketQuarantine, err) {
		collectQuarantine(ch, q)
	}
	fail("jetstream", c.collectStreams(ctx, ch))
	for source := range failed {
		ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, 1, source)
	}
}

// collectQuarantine counts the addresses in quarantine by pool.
func collectQuarantine(ch chan<- prometheus.Metric, q []events.Quarantine) {
	byPool := map[string]int{}
	for _, r := range q {
		byPool[r.Pool]++
	}
	for pool, n := range byPool {
		ch <- prometheus.MustNewConstMetric(descQuarantine, prometheus.GaugeValue, float64(n), pool)
	}
}

func collectPhases(ch chan<- prometheus.Metric, rows []fleet.Row) {
	counts := map[[2]string]int{}
	for i := range rows {
		counts[[2]string{rows[i].Provider, string(rows[i].Phase)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descProxies, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// collectPools exports each pool's gauges that the reads behind them allow: its phase and
// desired replicas need both pool buckets (a spec that does not parse is Invalid whatever its
// status says); its members need the specs (their owner), the statuses (their phase) and the
// ledgers (owners of rows without a spec); leased also needs the leases. A pool whose spec
// does not parse has no desired gauge.
func collectPools(ch chan<- prometheus.Metric, pools []fleet.PoolRow, failed map[string]bool) {
	if failed[events.BucketPools] || failed[events.BucketPoolStatus] {
		return
	}
	members := !failed[events.BucketProxies] && !failed[events.BucketStatus]
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, p := range pools {
		gauge(descPoolInfo, 1, p.Name, string(p.Phase))
		if p.Desired != nil {
			gauge(descPoolDesired, *p.Desired, p.Name)
		}
		if a := p.Autoscale; a != nil {
			gauge(descAutoscaleLimit, a.Min, p.Name, "min")
			gauge(descAutoscaleLimit, a.Max, p.Name, "max")
			if a.State != nil {
				gauge(descAutoscaleWant, a.State.Inputs.Wanted, p.Name)
			}
		}
		if !members {
			continue
		}
		gauge(descPoolMembers, p.Members, p.Name)
		gauge(descPoolReady, p.Ready, p.Name)
		gauge(descPoolDraining, p.Draining, p.Name)
		if !failed[events.BucketLeases] {
			gauge(descPoolLeased, p.Leased, p.Name)
		}
	}
}

// collectAnonymity exports every verdict, unknown included, at 0 when no proxy has it, so a
// panel or an alert (say on transparent > 0) sees the series before the first such proxy.
func collectAnonymity(ch chan<- prometheus.Metric, counts map[events.Anonymity]int) {
	ch <- prometheus.MustNewConstMetric(descAnonymity, prometheus.GaugeValue, float64(counts[""]), "unknown")
	for _, a := range events.Anonymities {
		ch <- prometheus.MustNewConstMetric(descAnonymity, prometheus.GaugeValue, float64(counts[a]), string(a))
	}
}

// collectOverdue exports every provider that has proxies, at 0 when none is overdue, so an
// alert on the gauge sees the series before the first overdue probe.
func collectOverdue(ch chan<- prometheus.Metric, rows []fleet.Row) {
	counts := map[string]int{}
	for i := range rows {
		n := counts[rows[i].Provider]
		if rows[i].ProbeOverdue {
			n++
		}
		counts[rows[i].Provider] = n
	}
	for provider, n := range counts {
		ch <- prometheus.MustNewConstMetric(descOverdue, prometheus.GaugeValue, float64(n), provider)
	}
}

// clientCollector exports only the NATS client's statistics.
type clientCollector struct{ c *stateCollector }

func (cc clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNATSIn, descNATSOut, descNATSInBytes, descNATSOutBytes, descReconnects, descConnected} {
		ch <- d
	}
}

func (cc clientCollector) Collect(ch chan<- prometheus.Metric) { cc.c.collectClient(ch) }

func (c *stateCollector) collectClient(ch chan<- prometheus.Metric) {
	s := c.nc.Stats()
	ch <- prometheus.MustNewConstMetric(descNATSIn, prometheus.CounterValue, float64(s.InMsgs))
	ch <- prometheus.MustNewConstMetric(descNATSOut, prometheus.CounterValue, float64(s.OutMsgs))
	ch <- prometheus.MustNewConstMetric(descNATSInBytes, prometheus.CounterValue, float64(s.InBytes))
	ch <- prometheus.MustNewConstMetric(descNATSOutBytes, prometheus.CounterValue, float64(s.OutBytes))
	ch <- prometheus.MustNewConstMetric(descReconnects, prometheus.CounterValue, float64(s.Reconnects))
	connected := 0.0
	if c.nc.IsConnected() {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, connected)
}

// collectStreams reports every stream's size and, for provider op streams, each host
// consumer's queue: ack-pending is the ops in flight on that host.
func (c *stateCollector) collectStreams(ctx context.Context, ch chan<- prometheus.Metric) error {
	lister := c.store.JS.ListStreams(ctx)
	for info := range lister.Info() {
		name := info.Config.Name
		ch <- prometheus.MustNewConstMetric(descStreamMsgs, prometheus.GaugeValue, float64(info.State.Msgs), name)
		ch <- prometheus.MustNewConstMetric(descStreamBytes, prometheus.GaugeValue, float64(info.State.Bytes), name)
		ch <- prometheus.MustNewConstMetric(descConsumers, prometheus.GaugeValue, float64(info.State.Consumers), name)
		provider, ok := strings.CutPrefix(name, "OPS_")
		if !ok {
			continue
		}
		stream, err := c.store.JS.Stream(ctx, name)
		if err != nil {
			return err
		}
		cl := stream.ListConsumers(ctx)
		for ci := range cl.Info() {
			host, ok := strings.CutPrefix(ci.Name, "host_")
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(ci.NumAckPending), provider, host)
			ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(ci.NumPending), provider, host)
		}
		if err := cl.Err(); err != nil {
			return err
		}
	}
	return lister.Err()
}
