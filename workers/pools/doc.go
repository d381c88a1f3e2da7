// Package pools is the pool controller (DESIGN §5.7): it keeps each pool of the pools bucket
// at its replicas by writing member specs into proxies, where they are ordinary proxies that
// the reconciler, probers and leasers treat like any other. It replaces members
// successor-first (by age, template change or burned address), drains a replaced member by
// its leases, and never lets a pool have more than replicas + maxSurge members.
//
// The cap is held by a ledger, not by memory: a pool's PoolStatus record in pool_status lists
// its members, a member is recorded there (compare-and-set on the record's revision, which
// checks the cap) before its spec is written to proxies and leaves it only after its spec is
// deleted. Any number of controllers racing, or one killed between any two writes, can
// therefore never make the specs a pool owns outnumber its cap. Only the leader (a lease in
// egress_locks) acts; the ledger makes a stale leader harmless too.
//
// The controller is a role like the reconciler: it runs in the reconciler's process and
// imports no other role.
package pools
