package client

import (
	"context"
	"errors"
	"strconv"

	"github.com/egressd/egressd/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// WithTracerProvider sets where the client's spans go (default: the global provider). The
// client only uses the OpenTelemetry API: the program chooses and installs an SDK.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) { c.tracer = tracing.Tracer(tp) }
}

// startRequest starts the span of a request when the caller's context carries a span, and
// returns the headers carrying it to the lease service; an untraced call gets neither.
// Nothing of the request or reply (lease IDs, holders, targets, proxy URLs) is recorded.
func (c *Client) startRequest(ctx context.Context, subject string) (trace.Span, map[string][]string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, nil
	}
	ctx, span := tracing.StartSend(ctx, c.tracer, tracing.Destination{Subject: subject, Template: subject}, trace.SpanKindClient)
	return span, tracing.Inject(ctx)
}

// endRequest ends a request's span; failed marks a call that got no reply or an error.
func endRequest(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		tracing.Fail(span, errorType(err))
	}
	span.End()
}

// errorType is error.type for a failed call: the service's error code, or what kept the
// reply from arriving.
func errorType(err error) string {
	var se *Error
	switch {
	case errors.As(err, &se):
		return strconv.Itoa(int(se.Code))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	}
	return "_OTHER"
}
