// Package events holds the messages and records egressd's roles exchange over NATS, and the
// words in them: the subjects and stream names; ops, op results, proxy status, health,
// leases, cooldowns, the provider catalog and checks, locks and the events (on EGRESS_EVENTS
// and EGRESS_LEASE_EVENTS);
// the lease service's requests, replies and errors; and the vocabulary as typed constants
// (phases, op kinds, error classes, reasons, event kinds, report results, error codes).
// Every record in a bucket or stream carries "v": 1. Field names are lowerCamelCase, and
// every record is pinned by a golden file in testdata.
//
// This package imports only the standard library.
package events
