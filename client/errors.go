package client

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/egressd/egressd/events"
)

// Sentinels for errors.Is on an *Error, one per service error code, and ErrExpired for a
// lease whose renewals did not get through in time.
var (
	ErrBadRequest = errors.New("bad request")                    // 400: the request names the field at fault
	ErrNotFound   = errors.New("lease unknown or expired")       // 404
	ErrLost       = errors.New("lease lost to another holder")   // 409
	ErrEnded      = errors.New("lease ended with its proxy")     // 410: Error.End says why
	ErrInternal   = errors.New("lease service internal error")   // 500: retry
	ErrNoProxy    = errors.New("no proxy available")             // 503: see Error.Availability, or Error.Session for a strict session
	ErrHolderCap  = errors.New("holder at its limit of leases")  // 429: Error.Limit is the limit
	ErrExpired    = errors.New("lease expired: renewals failed") // local: the service was unreachable for a whole TTL
	// ErrShardUnavailable (503 with the retry hint, Error.Shards says which): the request
	// needed a lease shard whose stream has no leader right now (a NATS node was lost). The
	// client tries again within its retry budget; a caller sees it only after that.
	ErrShardUnavailable = errors.New("lease shard unavailable")
)

var byCode = map[events.ErrorCode]error{
	events.CodeBadRequest:  ErrBadRequest,
	events.CodeNotFound:    ErrNotFound,
	events.CodeConflict:    ErrLost,
	events.CodeGone:        ErrEnded,
	events.CodeInternal:    ErrInternal,
	events.CodeUnavailable: ErrNoProxy,
	events.CodeTooMany:     ErrHolderCap,
}

// Error is an error answer of the lease service.
type Error struct {
	Code         events.ErrorCode      // an events.Code* value
	Message      string                // names the problem; never carries credentials
	Field        string                // the request field at fault, if one is
	Availability *events.Availability  // on ErrNoProxy: why nothing could be leased
	End          events.Reason         // on ErrEnded: the proxy was deleted or its instance replaced
	Reason       events.ErrorReason    // refines Code: events.ErrorHolderAtCap, events.ErrorSessionUnavailable
	Limit        int                   // on ErrHolderCap: the holder's limit of concurrent leases
	Session      *events.SessionDetail // with events.ErrorSessionUnavailable: the session's proxy and why it is unavailable
	Wait         *events.WaitDetail    // on ErrNoProxy after AcquireOptions.Wait: how long it waited, its place, why it stopped
	Shards       *events.ShardDetail   // on ErrShardUnavailable: the stalled shards, the candidates passed over
	// Retry: the service failed on its side (ErrInternal, or a replica that stopped while the
	// acquire waited): the client tried again within its retry budget, and this was the last
	// try's answer.
	Retry bool
}

func (e *Error) Error() string {
	return "lease service: " + strconv.Itoa(int(e.Code)) + ": " + e.Message
}

// Is matches the sentinel of e's code, and ErrShardUnavailable by its reason.
func (e *Error) Is(target error) bool {
	if target == ErrShardUnavailable {
		return e.Reason == events.ErrorShardUnavailable
	}
	return byCode[e.Code] == target && target != nil
}

// expired is the error of a lease whose renewals all failed for a whole TTL.
func expired(last error) error { return fmt.Errorf("%w (last error: %w)", ErrExpired, last) }
