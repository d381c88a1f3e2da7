package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every egressd span.
const ScopeName = "github.com/egressd/egressd"

// Tracer is egressd's tracer from tp, or from the global provider when tp is nil (a no-op
// unless cmd/egressd or the embedding program installed an SDK).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Destination names one NATS subject the way the semantic conventions want it on a span:
// the subject itself in messaging.destination.name, and a low-cardinality template (subjects
// hold proxy names) in messaging.destination.template and the span name.
type Destination struct {
	Subject  string // egress.ops.local.h1.p1
	Template string // egress.ops.{provider}.{host}.{proxy}
}

// StartSend starts the span of a message sent to d: PRODUCER for a publish, CLIENT for a
// request whose reply is awaited. Inject its context into the message's headers.
func StartSend(ctx context.Context, tr trace.Tracer, d Destination, kind trace.SpanKind, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	name := "publish"
	if kind == trace.SpanKindClient {
		name = "send"
	}
	ctx, span := tr.Start(ctx, name+" "+d.Template, append(opts, trace.WithSpanKind(kind))...)
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(d, semconv.MessagingOperationTypeSend, name)...)
	}
	return ctx, span
}

// StartProcess starts the span of handling a message received on d whose headers are h, as
// a child of the sender's span they carry: CONSUMER for a stream message, SERVER for a
// request that gets a reply.
func StartProcess(ctx context.Context, tr trace.Tracer, d Destination, h map[string][]string, kind trace.SpanKind, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := tr.Start(Extract(ctx, h), "process "+d.Template, append(opts, trace.WithSpanKind(kind))...)
	if span.IsRecording() { // tracing off builds no attributes
		span.SetAttributes(messagingAttrs(d, semconv.MessagingOperationTypeProcess, "process")...)
	}
	return ctx, span
}

func messagingAttrs(d Destination, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{messagingSystem, op, semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(d.Subject), semconv.MessagingDestinationTemplate(d.Template)}
}

// MessageID is messaging.message.id: egressd's message IDs (Nats-Msg-Id) name an op or an
// event, never a secret.
func MessageID(id string) attribute.KeyValue { return semconv.MessagingMessageID(id) }

// Fail marks span failed with an error class (error.type and the status), never the
// error's message: messages may quote what a provider or a request said. An empty class is
// no failure.
func Fail[C ~string](span trace.Span, class C) {
	if class == "" {
		return
	}
	span.SetAttributes(ErrorType.String(string(class)))
	span.SetStatus(codes.Error, string(class))
}
