// Package workers holds what every role shares: the one function that settles a JetStream
// message from a provider error class, retry backoff, and leader election over a TTL key.
// Roles live in sub-packages and never import each other; they talk only through NATS.
package workers
