package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
)

// DefaultRetryBudget is how long a request is tried again, by default, after a failure that
// another try can mend: long enough to ride out a leaser's restart, a reconnect or a NATS
// node's loss (its streams elect new leaders within nats-server's 9 s longest election
// timeout; a release into a lease shard stalled that long answers ShardUnavailable until
// then, and the last backoff of 1 s comes on top), short enough that a crawler with no lease
// service at all hears of it.
const DefaultRetryBudget = 15 * time.Second

// WithRetryBudget bounds how long a request is tried again after a failure that another try
// can mend (see Retryable), within the context's own deadline; 0 tries once. Default
// DefaultRetryBudget.
func WithRetryBudget(d time.Duration) Option { return func(c *Client) { c.retryBudget = max(d, 0) } }

// Backoff between tries: from the first step, doubled each time, up to the last, each drawn
// between half and all of it so that crawlers that failed together do not return together.
const (
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = time.Second
)

// call sends req to subject and decodes the reply into resp, trying again within the retry
// budget after a failure that Retryable says another try can mend; it returns the last try's
// error, and whether a try before it may have reached the service (a timeout or an error
// answered by it, as opposed to nobody listening). Every request is safe to send again: an
// acquire carries its request ID, and renew, release and report act on a lease ID. hold is
// how long the service may hold each try (callOnce's wait).
func (c *Client) call(ctx context.Context, subject string, req, resp any, hold time.Duration) (maybeDone bool, err error) {
	data, err := json.Marshal(req)
	if err != nil {
		return false, err
	}
	deadline := time.Now().Add(c.retryBudget)
	for wait := firstBackoff; ; wait = min(2*wait, maxBackoff) {
		err := c.callOnce(ctx, subject, data, resp, hold)
		if err == nil || ctx.Err() != nil || !Retryable(err) {
			return maybeDone, err
		}
		pause := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(pause).After(deadline) {
			return maybeDone, err
		}
		maybeDone = maybeDone || !errors.Is(err, nats.ErrNoResponders)
		select {
		case <-ctx.Done():
			return maybeDone, err
		case <-time.After(pause):
		}
	}
}

// Retryable reports whether err is a failure that the same request sent again may mend, and
// that the client therefore tries again within its budget: nobody answering (no responders:
// a leaser restarting), a try that timed out (a reply lost, a node lost), or a service error
// with its retry hint (500, a replica that stopped). Refusals are not: a bad request (400),
// a lease unknown, lost or ended (404, 409, 410), a holder at its cap (429), no proxy
// available (503 without the hint). ErrShardUnavailable (503 with the hint) is retryable.
func Retryable(err error) bool {
	if se, ok := errors.AsType[*Error](err); ok {
		return se.Retry || se.Code == events.CodeInternal
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}
