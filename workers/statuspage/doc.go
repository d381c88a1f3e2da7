// Package statuspage serves the all-in-one's read-only status page (DESIGN §5.5): proxies
// with phase, address, health, leases and age; provider targets and their checks; the most
// recent events on EGRESS_EVENTS; and the same data as JSON at /api/status.json.
//
// Proxies come from the read model (workers/fleet) that `egressd status` and the metrics
// share, so the three agree. At thousands of proxies the page shows one page of them (100 by
// default) with the totals of the whole fleet; query parameters filter and page it (phase,
// provider, selector, q, page, per_page), the page's form and links carry them, and the
// JSON takes the same ones.
//
// Everything is read from NATS when a page is requested, never cached in counters that could
// drift from the buckets. Each request is bounded by a timeout, and a failed read shows an
// error banner beside whatever could still be read rather than a blank page.
//
// The page only shows status, health, lease, provider-check and event records. Of a proxy's
// spec the read model keeps the mode, provider, lease limit, attributes and probe interval;
// user-data and credentials never leave the parser, so they cannot reach the page or the
// JSON.
package statuspage
