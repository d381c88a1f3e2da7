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

// The JetStream API's codes for a cluster that cannot place a stream now: a peer missed its
// heartbeats on a loaded machine, or the meta layer is between leaders. Another try mends
// both; a cluster that truly lacks the peers still fails, with this message, at the end of
// the declaration's budget.
const (
	errCodeNoPeers     jetstream.ErrorCode = 10005 // "no suitable peers for placement"
	errCodeUnavailable jetstream.ErrorCode = 10008 // "JetStream system temporarily unavailable"
)

// retryable: the try ran out of time, found no JetStream to answer it yet, or found the
// cluster unable to place a stream for now.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeNoPeers || apiErr.ErrorCode == errCodeUnavailable) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}
