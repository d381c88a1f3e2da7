// Package fleet is the one read model of the fleet (DESIGN §5.8): it joins proxies,
// proxy_status, proxy_health and proxy_leases into one row per proxy, and judges, in one
// place, what every reader shows: the phase, the health verdict at the proxy's current
// address, whether its probes are overdue, and the leases it holds. It joins pools and
// pool_status with those rows into one row per pool: its phase, desired replicas, and its
// members (the rows whose spec names it as owner) counted as ready, leased and draining.
// `egressd status`, the status page with its JSON, and the state metrics all read the fleet
// through Load. Cooldowns reads the running cooldowns of proxy_cooldowns, Targets the
// provider checks.
//
// It is a read model, not a role: it lives in readside/ with the status page and the metrics,
// imports events, schemas and kvstore and never a role, and no role imports it (deps_test.go
// holds both directions).
//
// Of a proxy's spec it keeps the mode, provider, lease limit, attributes and probe interval;
// user-data and credentials never leave the parser, so no reader can show them. Of a pool's
// spec it keeps the replicas, or why it does not parse; the template never leaves the parser.
package fleet
