// Package events holds the messages and records egressd's roles exchange over NATS: the
// subjects and stream names, ops, op results, proxy status and the events on EGRESS_EVENTS.
// Every record carries "v": 1. Field names are lowerCamelCase and pinned by golden files.
//
// This package imports only the standard library.
package events
