package leaser

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/micro"
)

// apiError is an answer the caller gets as a service error: its code goes in the
// Nats-Service-Error-Code header, its message in Nats-Service-Error, and both (with the field
// and the availability) in an events.ErrorReply body. Messages never carry credentials.
type apiError struct {
	code  events.ErrorCode
	field string
	msg   string
	avail *events.Availability
	end   events.Reason // with CodeGone
	// reason refines the code; limit (HolderAtCap) and session (SessionUnavailable) detail it.
	reason  events.ErrorReason
	limit   int
	session *events.SessionDetail
	wait    *events.WaitDetail  // a waiting acquire that stopped without a lease
	shards  *events.ShardDetail // with ErrorShardUnavailable
	retry   bool                // the service's side failed: the same request may succeed shortly
}

func (e *apiError) Error() string { return strconv.Itoa(int(e.code)) + " " + e.msg }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{code: events.CodeBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// errInternal is what a caller is told of a failure on our side; the cause is only logged.
var errInternal = &apiError{code: events.CodeInternal, msg: "internal error in the lease service; retry", retry: true}

// replyError sends err as a service error. Anything but an *apiError is an internal failure:
// it is logged and the caller gets a generic 500, since a KV error may quote keys or payloads.
func (l *Leaser) replyError(req micro.Request, endpoint string, err error) {
	ae, body := l.errorReply(endpoint, err)
	if rerr := req.Error(strconv.Itoa(int(ae.code)), ae.msg, body); rerr != nil {
		l.log.Warn("reply", "endpoint", endpoint, "err", rerr)
	}
}

// errorReply is err as the caller sees it, with its events.ErrorReply body; the NATS and the
// HTTP face answer with the same.
func (l *Leaser) errorReply(endpoint string, err error) (*apiError, []byte) {
	var ae *apiError
	if !errors.As(err, &ae) {
		l.log.Error("request failed", "endpoint", endpoint, "err", err)
		ae = errInternal
	}
	body, merr := json.Marshal(events.ErrorReply{Error: events.ErrorDetail{Code: ae.code, Message: ae.msg, Field: ae.field, Availability: ae.avail, End: ae.end,
		Reason: ae.reason, Limit: ae.limit, Session: ae.session, Wait: ae.wait, Shards: ae.shards, Retry: ae.retry}})
	if merr != nil {
		body = nil
	}
	return ae, body
}

// result names the outcome of a request for the Observer.
func result(endpoint string, err error) string {
	var ae *apiError
	switch {
	case err == nil && endpoint == "acquire":
		return "granted"
	case err == nil:
		return "ok"
	case !errors.As(err, &ae):
		return "error"
	}
	switch ae.code {
	case events.CodeBadRequest:
		return "bad_request"
	case events.CodeNotFound:
		return "not_found"
	case events.CodeConflict:
		return "conflict"
	case events.CodeGone:
		return "gone"
	case events.CodeUnavailable:
		if ae.reason == events.ErrorShardUnavailable {
			return "shard_unavailable"
		}
		return "unavailable"
	case events.CodeUnauthorized:
		return "unauthorized"
	case events.CodeMethodNotAllowed, events.CodeTooLarge:
		return "bad_request"
	case events.CodeTooMany:
		return "holder_at_cap"
	}
	return "error"
}
