package local

import (
	"context"
	"errors"
	"syscall"

	"github.com/egressd/egressd/providers"
)

// Causes this package gives its errors; classify turns them into classes.
var (
	errBadID         = errors.New("malformed instance ID")
	errBadRequest    = errors.New("invalid request")
	errNoInstance    = errors.New("no such instance")
	errCorrupt       = errors.New("instance state unreadable")
	errConflict      = errors.New("instance name taken")
	errPoolExhausted = errors.New("address pool exhausted")
	errBinary        = errors.New("cannot run the forward-proxy program")
	errStartTimeout  = errors.New("forward proxy did not start in time")
	errStillRunning  = errors.New("forward proxy process survived SIGKILL")
	errBusy          = errors.New("instance busy")
)

// classify is the one place that maps a failure to its class. Errors already classified pass
// through.
func (p *Provider) classify(op, id string, err error) error {
	if err == nil {
		return nil
	}
	class := providers.ErrTransient
	switch {
	case errors.Is(err, errNoInstance):
		class = providers.ErrNotFound
	case errors.Is(err, errPoolExhausted),
		errors.Is(err, syscall.EADDRINUSE), // the address was taken between the pick and the start
		errors.Is(err, syscall.ENOSPC),
		errors.Is(err, syscall.EDQUOT):
		class = providers.ErrQuota
	case errors.Is(err, errBadID),
		errors.Is(err, errBadRequest),
		errors.Is(err, errConflict),
		errors.Is(err, errBinary),
		errors.Is(err, syscall.EADDRNOTAVAIL), // a pool address that is not on this host
		errors.Is(err, syscall.EACCES),        // the state dir, or a privileged port
		errors.Is(err, syscall.EPERM),
		errors.Is(err, syscall.EROFS):
		class = providers.ErrPermanent
	case errors.Is(err, errStartTimeout),
		errors.Is(err, errBusy),
		errors.Is(err, errCorrupt),
		errors.Is(err, errStillRunning),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		class = providers.ErrTransient
	}
	// The contract forbids NotFound from anything but Get: Delete of a missing instance
	// succeeds, and Create never reports NotFound.
	if class == providers.ErrNotFound && op != "get" {
		class = providers.ErrTransient
	}
	return providers.Wrap(class, op, p.name, id, err)
}
