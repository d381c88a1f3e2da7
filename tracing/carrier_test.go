package tracing_test

import (
	"context"
	"testing"

	"github.com/egressd/egressd/tracing"
	"go.opentelemetry.io/otel/trace"
)

func TestInjectExtract(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		headers bool
	}{
		{"a span", traced, true},
		{"no span", context.Background(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tracing.Inject(tc.ctx)
			if (h != nil) != tc.headers {
				t.Fatalf("headers %v, want some: %v", h, tc.headers)
			}
			if !tc.headers {
				return
			}
			if got := h["traceparent"]; len(got) != 1 || got[0] != "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01" {
				t.Fatalf("traceparent %v (the key must be lowercase, as W3C spells it)", h)
			}
			got := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
			if !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() {
				t.Fatalf("extracted %v, want %v", got, sc)
			}
		})
	}
	// No headers, or headers without trace context: the context is as it was.
	for _, h := range []map[string][]string{nil, {"traceparent": {"garbage"}}} {
		if got := trace.SpanContextFromContext(tracing.Extract(traced, h)); got.SpanID() != sc.SpanID() {
			t.Fatalf("Extract(%v) replaced the span context", h)
		}
	}
}
