// Package tracing is what every role shares for OpenTelemetry traces: W3C trace context in
// NATS message headers, the span shapes of a NATS send and process, and the attribute names
// egressd records. It uses only the OpenTelemetry API, never the SDK, so the Go client can
// import it without pulling an exporter in; cmd/egressd installs the SDK when the OTEL_*
// environment asks for it (docs/tracing.md). Without that every span here is a no-op.
//
// Nothing secret is ever recorded: no user-data, auth, credentials, lease IDs or tokens, no
// error messages (only their class); see the attribute list in attrs.go.
package tracing
