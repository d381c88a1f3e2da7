// Package kvstore wraps the JetStream SDK once for egressd: it declares the buckets and
// streams of DESIGN §3 idempotently, maps the SDK's errors to ErrNotFound and ErrConflict, and
// offers typed JSON reads and writes, compare-and-swap helpers, TTL locks with fencing
// revisions, and Watch, the one way a role mirrors a bucket (initial values, a marker, then
// changes; removals as removals; one error when the watch ends).
//
// Store holds every handle; a role takes only the ones its NATS user may touch, in a Buckets
// struct of its own (BucketsOf(store)), and reads nothing else.
package kvstore
