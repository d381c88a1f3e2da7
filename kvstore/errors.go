package kvstore

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrNotFound: the key does not exist (or was deleted or expired).
	ErrNotFound = errors.New("kvstore: not found")
	// ErrConflict: a compare-and-swap lost, or Create found the key present.
	ErrConflict = errors.New("kvstore: conflict")
	// ErrNoAnswer: a read that streams its answer (LastEntries) ended before the server said
	// it was whole: the request's budget ran out, or nothing answered it.
	ErrNoAnswer = errors.New("kvstore: no whole answer")
	// ErrTooManyKeys: a LastEntries read matched more keys than the server answers at once.
	ErrTooManyKeys = errors.New("kvstore: the read matches too many keys")
)

// mapErr translates the SDK's KV errors; anything else passes through wrapped as is.
func mapErr(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return errors.Join(ErrNotFound, err)
	case errors.Is(err, jetstream.ErrKeyExists):
		return errors.Join(ErrConflict, err)
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164):
		return errors.Join(ErrConflict, err)
	}
	return err
}
