package providers

import (
	"errors"
	"fmt"
)

// The error classes. Every error a provider returns is one of these (errors.Is), and the
// backend's own error stays reachable through errors.As.
var (
	// ErrNotFound: the instance is truly gone.
	ErrNotFound = errors.New("not found")
	// ErrQuota: the backend has no room now; retrying later may succeed.
	ErrQuota = errors.New("quota exceeded")
	// ErrTransient: retrying may succeed (network, timeouts, locks, unclassified errors).
	ErrTransient = errors.New("transient error")
	// ErrPermanent: retrying will not help until the spec or the config changes.
	ErrPermanent = errors.New("permanent error")
)

// Error is a classified provider error.
type Error struct {
	Class    error  // one of ErrNotFound, ErrQuota, ErrTransient, ErrPermanent
	Op       string // create, get, delete, list, check
	Provider string // the configured provider name
	ID       string // instance ID or name, when known
	Err      error  // the backend's error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s %s", e.Provider, e.Op)
	if e.ID != "" {
		msg += " " + e.ID
	}
	msg += ": " + e.Class.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes both the class and the backend error.
func (e *Error) Unwrap() []error { return []error{e.Class, e.Err} }

// Wrap classifies err. A nil err stays nil, and an error already classified (somewhere in
// its chain) keeps its class: the innermost decision, made where the cause was known, wins.
func Wrap(class error, op, provider, id string, err error) error {
	if err == nil {
		return nil
	}
	var done *Error
	if errors.As(err, &done) {
		return err
	}
	return &Error{Class: class, Op: op, Provider: provider, ID: id, Err: err}
}

// Errorf builds a classified error from a message.
func Errorf(class error, op, provider, id, format string, args ...any) error {
	return &Error{Class: class, Op: op, Provider: provider, ID: id, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of err: nil for nil, the class a provider gave it, and
// ErrTransient for anything unclassified (including cancelled contexts).
func ClassOf(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return ErrNotFound
	case errors.Is(err, ErrQuota):
		return ErrQuota
	case errors.Is(err, ErrPermanent):
		return ErrPermanent
	default:
		return ErrTransient
	}
}
