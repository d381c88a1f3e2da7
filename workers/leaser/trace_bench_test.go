package leaser_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkAcquireReleaseTracing is BenchmarkAcquireRelease with tracing off (no SDK: the
// API's no-op) and on (the SDK sampling every span into a batch processor whose exporter
// drops them), so the cost of the spans is the ratio of the two from one run.
func BenchmarkAcquireReleaseTracing(b *testing.B) {
	b.Run("off", func(b *testing.B) { acquireRelease(b, startBenchLeaser(b, nil, nil)) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		acquireRelease(b, startBenchLeaser(b, tp, nil))
	})
}
