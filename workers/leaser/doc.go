// Package leaser is the lease service of DESIGN §3.5: a NATS micro service (events.LeaseService
// on egress.lease.{acquire,renew,release,report}) that hands Ready proxies out to crawlers.
//
// Any number of replicas may run. Each keeps an in-memory view of proxies, status, health,
// leases and cooldowns fed by KV watches and picks candidates from it; only the commit is
// exact: a lease is the atomic Create of a slot key <proxy>.<slot> (slot < maxLeases) with the
// lease's TTL in proxy_leases, so the server arbitrates between replicas and expires the
// lease itself. A stale view costs a retry on the next slot, never an extra lease.
//
// A lease ID is <proxy>.<slot>.<token>, the token random per grant and kept in the slot's
// record: the ID stays valid across renewals and restarts of every replica, and a later grant
// of the same slot has another token, so an old holder can neither renew nor release it.
//
// The package is the service shell around two parts of its own:
//   - selection, the pure core where the lease order is decided (selection/order.go): the
//     view (view.go) turns watch entries into its typed updates, acquire.go reads ranked
//     candidates from it and commits them;
//   - httpface, the HTTP face, which calls the service in-process (face.go).
//
// The shell keeps everything that talks to NATS: the watches, every KV write (slots, holder
// slots, sessions, cooldowns), leftovers, statistics, events and the micro service.
//
// See docs/leases.md for the wire contract.
package leaser
