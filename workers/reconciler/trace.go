package reconciler

import (
	"context"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/tracing"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// decisionTrace is the spans of one proxy's way through a pass: the processing of the op
// result it folds (a child of the provisioner's publish, through the message headers) and
// the decision, which is the parent of the ops it publishes. Only decisions that fold a
// result or issue ops get spans: the many that change nothing would drown the traces.
type decisionTrace struct {
	ctx            context.Context // the decision's span, for its ops
	result, decide trace.Span      // nil when not traced
}

// traceDecision records a decision made at in.Now, once it is known to be worth a span.
func (l *loop) traceDecision(ctx context.Context, in Input, d Decision, m jetstream.Msg) decisionTrace {
	if m == nil && len(d.Ops) == 0 {
		return decisionTrace{ctx: ctx}
	}
	t := decisionTrace{ctx: ctx}
	proxy := tracing.Proxy.String(in.Name)
	at := trace.WithTimestamp(in.Now)
	if m != nil {
		dest := tracing.Destination{Subject: m.Subject(), Template: events.OpResultSubjectTemplate}
		t.ctx, t.result = tracing.StartProcess(ctx, l.tracer, dest, m.Headers(), trace.SpanKindConsumer, at, trace.WithAttributes(proxy))
		if in.Result != nil {
			t.result.SetAttributes(tracing.OpKind.String(string(in.Result.Kind)), tracing.OpID.String(in.Result.OpID))
			tracing.Fail(t.result, in.Result.ErrorClass)
		}
	}
	t.ctx, t.decide = l.tracer.Start(t.ctx, "decide", at, trace.WithAttributes(proxy, tracing.Ops.Int(len(d.Ops))))
	if d.Status != nil {
		t.decide.SetAttributes(tracing.Phase.String(string(d.Status.Phase)))
	}
	return t
}

// end closes the spans once the decision is carried out; failed says its status write
// failed (nothing was published).
func (t decisionTrace) end(failed bool) {
	if t.decide == nil {
		return
	}
	if failed {
		t.decide.SetStatus(codes.Error, "status write failed")
	}
	t.decide.End()
	if t.result != nil {
		t.result.End()
	}
}

// sendOp starts the span of an op's publish, a child of the decision in ctx.
func (l *loop) sendOp(ctx context.Context, op events.Op) (context.Context, trace.Span) {
	dest := tracing.Destination{Subject: events.OpSubject(op.Provider, op.Host, op.Proxy), Template: events.OpSubjectTemplate}
	return tracing.StartSend(ctx, l.tracer, dest, trace.SpanKindProducer, trace.WithAttributes(
		tracing.MessageID(op.MsgID()), tracing.Proxy.String(op.Proxy), tracing.Provider.String(op.Provider),
		tracing.Host.String(op.Host), tracing.OpKind.String(string(op.Kind)), tracing.OpID.String(op.ID)))
}
