// Package statuspage serves the all-in-one's read-only status page (DESIGN §5.5): proxies
// with phase, address, health, leases and age; provider targets and their checks; the most
// recent events on EGRESS_EVENTS; and the same data as JSON at /api/status.json.
//
// Everything is read from NATS when a page is requested, never cached in counters that could
// drift from the buckets. Each request is bounded by a timeout, and a failed read shows an
// error banner beside whatever could still be read rather than a blank page.
//
// The page only shows status, health, lease, provider-check and event records. Of a proxy's
// spec it keeps the mode, provider, lease limit and attributes; user-data and credentials are
// never copied out of the parser, so they cannot reach the page or the JSON.
package statuspage
