package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Attributes egressd records besides the messaging.* ones of the semantic conventions. They
// name things (proxies, providers, ops, slots) and outcomes, never contents: a spec's auth
// and user-data, credentials, lease IDs and tokens, the holder and target of a lease and
// error messages are never attributes, events or statuses of a span.
const (
	Proxy        = attribute.Key("egressd.proxy")
	Provider     = attribute.Key("egressd.provider")
	Host         = attribute.Key("egressd.host")
	OpKind       = attribute.Key("egressd.op.kind")
	OpID         = attribute.Key("egressd.op.id")
	OpAttempt    = attribute.Key("egressd.op.attempt")
	Phase        = attribute.Key("egressd.phase")
	Ops          = attribute.Key("egressd.ops") // how many ops a decision issued
	Slot         = attribute.Key("egressd.lease.slot")
	LeaseOutcome = attribute.Key("egressd.lease.outcome")

	// ErrorType is the semantic conventions' error.type: egressd puts an error's class there
	// (Transient, Quota …), never its message.
	ErrorType = semconv.ErrorTypeKey
)

// messagingSystem is messaging.system: the conventions list no value for NATS, and "nats" is
// what other NATS instrumentations use.
var messagingSystem = semconv.MessagingSystemKey.String("nats")
