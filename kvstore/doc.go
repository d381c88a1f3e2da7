// Package kvstore wraps the JetStream SDK once for egressd: it declares the buckets and
// streams of DESIGN §3 idempotently, maps the SDK's errors to ErrNotFound and ErrConflict, and
// offers typed JSON reads and writes, compare-and-swap helpers and TTL locks with fencing
// revisions. Callers keep their own one-to-three-method interfaces over what it returns.
package kvstore
