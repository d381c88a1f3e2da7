package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Carrier adapts NATS message headers (nats.Header, micro.Headers: both convert to it) to
// OpenTelemetry's carrier. Keys are kept as written, so the header is "traceparent" as the
// W3C spelling has it: NATS headers are case-sensitive, unlike propagation.HeaderCarrier's
// canonicalised HTTP ones.
type Carrier map[string][]string

var (
	_ propagation.TextMapCarrier = Carrier(nil)
	_ propagation.ValuesGetter   = Carrier(nil)
)

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key (tracestate may be split over several).
func (c Carrier) Values(key string) []string { return c[key] }

// Set replaces the values of key.
func (c Carrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys present.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// propagator is W3C trace context: the one format every role and the client agree on,
// whatever OTEL_PROPAGATORS says, so a trace never breaks between two egressd processes.
var propagator = propagation.TraceContext{}

// Inject returns headers carrying ctx's span context, or nil when ctx carries none (tracing
// off, or an untraced caller): an untraced message gets no header at all.
func Inject(ctx context.Context) map[string][]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := Carrier{}
	propagator.Inject(ctx, c)
	return c
}

// Extract returns ctx with the remote span context h carries, if any.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, Carrier(h))
}
