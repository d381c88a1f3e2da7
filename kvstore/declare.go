package kvstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// declareAttempt bounds one JetStream API call of a declaration. The calls are idempotent
// (create or update to the same config), and a request whose reply is lost (a meta leader
// elected meanwhile, a stream's placement in flight on a loaded cluster) would otherwise
// wait out the whole declaration's budget: one try of a few seconds, then another, answers
// as soon as the cluster does.
const declareAttempt = 10 * time.Second

// declare runs call with a budget of declareAttempt per try until it succeeds, fails with
// an error that another try cannot mend, or ctx ends.
func declare[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, declareAttempt)
		v, err := call(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// retryable: the try ran out of time or found no JetStream to answer it yet.
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}
