package provisioner

import (
	"context"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/tracing"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// startProcess starts the span of one delivery of an op, a child of the reconciler's
// publish through the message headers.
func (p *Provisioner) startProcess(ctx context.Context, m jetstream.Msg) (context.Context, trace.Span) {
	dest := tracing.Destination{Subject: m.Subject(), Template: events.OpSubjectTemplate}
	return tracing.StartProcess(ctx, p.tracer, dest, m.Headers(), trace.SpanKindConsumer,
		trace.WithAttributes(tracing.Provider.String(p.cfg.Provider)))
}

// opAttrs names an op on its spans; the op carries no user-data or credentials.
func opAttrs(op events.Op) []attribute.KeyValue {
	return []attribute.KeyValue{tracing.Proxy.String(op.Proxy), tracing.Host.String(op.Host),
		tracing.OpKind.String(string(op.Kind)), tracing.OpID.String(op.ID)}
}

// call runs the op inside a span of its own: the provider call (with the spec read a create
// does first), as a client of the provider's API. Providers know nothing of tracing.
func (p *Provisioner) call(ctx context.Context, op events.Op) events.OpResult {
	ctx, span := p.tracer.Start(ctx, "provider "+string(op.Kind), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(opAttrs(op), tracing.Provider.String(p.cfg.Provider))...))
	defer span.End()
	res := p.run(ctx, op)
	tracing.Fail(span, res.ErrorClass)
	return res
}

// startPublishResult starts the span of a result's publish and returns the headers that
// carry it to the reconciler.
func (p *Provisioner) startPublishResult(ctx context.Context, subject, msgID string) (trace.Span, map[string][]string) {
	dest := tracing.Destination{Subject: subject, Template: events.OpResultSubjectTemplate}
	ctx, span := tracing.StartSend(ctx, p.tracer, dest, trace.SpanKindProducer, trace.WithAttributes(tracing.MessageID(msgID)))
	return span, tracing.Inject(ctx)
}
