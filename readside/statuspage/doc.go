// Package statuspage serves the all-in-one's read-only status page (DESIGN §5.5). Its first
// screen answers "is my fleet fine, and if not, what is wrong": a verdict on the whole fleet
// and the proxies that need attention (not Ready, probe overdue, cooling down), worst first,
// each with why (problems.go). Then pools with their desired, ready, leased and draining
// members and next rotation (when there are any); proxies with phase, address, health, leases
// and age; the running cooldowns of proxy_cooldowns; the lease holders and which proxies each
// has; provider targets and their checks; the most recent lifecycle events on EGRESS_EVENTS
// (not the lease traffic of EGRESS_LEASE_EVENTS, nor routine successful gets, which stay in
// the stream); and the same data as JSON at /api/status.json.
// From the leasers' sums on EGRESS_LEASE_STATS it charts the lease traffic (leases granted and
// blocked reports per provider, as SVG the server draws, so the page stays script-free) and
// lists the most blocked targets; each autoscaled pool has a demand chart, its members and the
// leases asked of it over the last hour, from its autoscale decisions on EGRESS_EVENTS and
// pool_demand now (demandchart.go); every rate naming what it is of (reports); /api/stats.json serves those sums as `egressd stats --json`
// does, through the same read model (fleet.LoadStats).
//
// Proxies come from the read model (readside/fleet) that `egressd status` and the metrics
// share, so the three agree. At thousands of proxies the page shows one page of them (100 by
// default) with the totals of the whole fleet; query parameters filter and page it (phase,
// provider, selector, pool, q, page, per_page), the page's form and links carry them, and the
// JSON takes the same ones. A pool's name links to the proxies table filtered to its members.
//
// Everything is read from NATS when a page is requested, never cached in counters that could
// drift from the buckets. Each request is bounded by a timeout, and a failed read shows an
// error banner beside whatever could still be read rather than a blank page.
//
// The page only shows status, health, lease, cooldown, pool-status, provider-check and event records. Of
// a pool's spec the read model keeps its replicas, never the template. Of a proxy's
// spec the read model keeps the mode, provider, lease limit, attributes and probe interval;
// user-data and credentials never leave the parser, so they cannot reach the page or the
// JSON.
package statuspage
