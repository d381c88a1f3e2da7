// Package metrics serves every egressd process's /metrics, /healthz and /readyz. State (proxies by
// phase, health, leases, host queues, provider targets, JetStream) is read from NATS at scrape
// time (the proxies through the shared read model, readside/fleet, one build reused for a
// second at most), so it cannot drift; only events that leave no state behind (ops run, leases asked for,
// probes, GC deletions) are counted, through the small observer interfaces the roles declare.
package metrics
