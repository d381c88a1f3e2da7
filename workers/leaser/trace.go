package leaser

import (
	"context"
	"errors"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/tracing"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// startRequest starts the span of one lease request, a child of the caller's span when the
// request's headers carry one (the Go client puts it there). Neither the request's body nor
// the reply is recorded: they hold lease IDs, holders, targets and proxy credentials.
func (l *Leaser) startRequest(ctx context.Context, endpoint string, headers map[string][]string) (context.Context, trace.Span) {
	dest := tracing.Destination{Subject: events.LeaseSubjectPrefix + "." + endpoint}
	dest.Template = dest.Subject
	return tracing.StartProcess(ctx, l.tracer, dest, headers, trace.SpanKindServer)
}

// requestResult records on a request's span the result the metrics count.
func requestResult(span trace.Span, result string) {
	if result != "ok" && result != "granted" {
		tracing.Fail(span, result)
	}
}

// tryCandidateTraced is tryCandidate inside a span naming the proxy and what became of it.
func (l *Leaser) tryCandidateTraced(ctx context.Context, r events.AcquireRequest, ttl time.Duration, c selection.Candidate, at *attempt) (any, int, error) {
	ctx, span := l.tracer.Start(ctx, "lease candidate", trace.WithAttributes(tracing.Proxy.String(c.Name)))
	defer span.End()
	g, conflicts, err := l.tryCandidate(ctx, r, ttl, c, at)
	outcome := "granted"
	switch {
	case errors.Is(err, errShardStalled):
		outcome = "shard_stalled" // the acquire moves on to another shard
	case err != nil:
		outcome = "error"
		tracing.Fail(span, "error")
	case g != nil:
	case at.CoolingGlobal[c.Name]:
		outcome = "cooling_global"
	case at.CoolingTarget[c.Name]:
		outcome = "cooling_target"
	default:
		outcome = "full"
	}
	span.SetAttributes(tracing.LeaseOutcome.String(outcome))
	return g, conflicts, err
}

// createSlot is the slot-key write of an acquire, in a span of its own: "taken" when another
// replica got the slot first.
func (l *Leaser) createSlot(ctx context.Context, kv jetstream.KeyValue, key string, slot int, value []byte, ttl time.Duration) (uint64, error) {
	ctx, span := l.tracer.Start(ctx, "create "+kv.Bucket(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.Slot.Int(slot)))
	defer span.End()
	rev, err := kvstore.CreateTTL(ctx, kv, key, value, ttl)
	switch {
	case err == nil:
		span.SetAttributes(tracing.LeaseOutcome.String("created"))
	case errors.Is(err, kvstore.ErrConflict):
		span.SetAttributes(tracing.LeaseOutcome.String("taken"))
	default:
		tracing.Fail(span, "error")
	}
	return rev, err
}
