package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultRetryBudget is how long a request is tried again, by default, after a failure that
// another try can mend: long enough to ride out a leaser's restart or a NATS reconnect, short
// enough that a crawler with no lease service at all hears of it.
const DefaultRetryBudget = 10 * time.Second

// WithRetryBudget bounds how long a request is tried again after a failure that another try
// can mend (no lease service answering yet; for renew and release, also a timeout or an
// internal error), within the context's own deadline; 0 tries once. Default
// DefaultRetryBudget.
func WithRetryBudget(d time.Duration) Option { return func(c *Client) { c.retryBudget = max(d, 0) } }

// retryPolicy says which failures of a request another try may mend without harm.
type retryPolicy int

const (
	// retryUndelivered: only when no lease service received the request (no responders). An
	// acquire that timed out may have been granted, and a report counted: trying again
	// could hold a second lease or count the block twice.
	retryUndelivered retryPolicy = iota
	// retryTransient: also after a timeout or an internal error. Renewing or releasing a lease
	// twice leaves it as once would.
	retryTransient
)

// Backoff between tries: from the first step, doubled each time, up to the last.
const (
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = time.Second
)

// call sends req to subject and decodes the reply into resp, trying again within the retry
// budget after a failure that policy allows; it returns the last try's error. hold is how
// long the service may hold each try (callOnce's wait).
func (c *Client) call(ctx context.Context, subject string, req, resp any, policy retryPolicy, hold time.Duration) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.retryBudget)
	for wait := firstBackoff; ; wait = min(2*wait, maxBackoff) {
		err := c.callOnce(ctx, subject, data, resp, hold)
		if err == nil || ctx.Err() != nil || !retryable(err, policy) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// retryable: err is a failure that policy lets another try mend.
func retryable(err error, policy retryPolicy) bool {
	if errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	return policy == retryTransient &&
		(errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrInternal))
}
