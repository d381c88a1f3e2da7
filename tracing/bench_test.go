package tracing_test

import (
	"context"
	"testing"

	"github.com/egressd/egressd/tracing"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkAcquireSpans is the tracing work of one traced acquire in the leaser, without the
// acquire: extract the caller's context from the headers, the request's span, one
// candidate's, one slot write's. Off is the API's no-op (no SDK installed); on samples every
// span into a batch processor whose exporter drops them. Compare with the CPU time of
// BenchmarkAcquireReleaseTracing in workers/leaser.
func BenchmarkAcquireSpans(b *testing.B) {
	caller := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	headers := tracing.Inject(caller)
	dest := tracing.Destination{Subject: "egress.lease.acquire", Template: "egress.lease.acquire"}
	on := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = on.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", noop.NewTracerProvider()}, {"on", on}} {
		tr := tracing.Tracer(tc.tp)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				ctx, req := tracing.StartProcess(context.Background(), tr, dest, headers, trace.SpanKindServer)
				ctx, cand := tr.Start(ctx, "lease candidate", trace.WithAttributes(tracing.Proxy.String("px-0001")))
				_, slot := tr.Start(ctx, "create proxy_leases", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(tracing.Slot.Int(0)))
				slot.SetAttributes(tracing.LeaseOutcome.String("created"))
				slot.End()
				cand.SetAttributes(attribute.String(string(tracing.LeaseOutcome), "granted"))
				cand.End()
				req.End()
			}
		})
	}
}
