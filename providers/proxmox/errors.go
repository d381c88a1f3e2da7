package proxmox

import (
	"errors"
	"net/http"
	"strings"

	"github.com/egressd/egressd/providers"
)

// Causes this package gives its errors; classify turns them into classes.
var (
	errBadID          = errors.New("malformed instance ID")
	errBadRequest     = errors.New("invalid request")
	errUnknownNode    = errors.New("node is not configured")
	errForeign        = errors.New("the name belongs to another instance")
	errNotOurs        = errors.New("not created by egressd")
	errTwins          = errors.New("two VMs have the name")
	errNoTemplate     = errors.New("template not found")
	errNoBootDisk     = errors.New("no boot disk")
	errBadAnswer      = errors.New("PVE's answer does not parse")
	errLocked         = errors.New("VM is locked")
	errTaskFailed     = errors.New("PVE task failed")
	errVMIDsExhausted = errors.New("no free VMID")
	errNotStarted     = errors.New("VM did not start")
	errGone           = errors.New("VM does not exist")
	errBusy           = errors.New("instance busy")
	errLocal          = errors.New("local I/O failed")
)

// The PVE messages classify matches, each pinned by a fixture in testdata named after the
// fact it was captured as (F1–F23, docs/providers/proxmox.md; ref- for users' reports).
const (
	msgNoConfig       = "Configuration file"              // F2: a missing VM (config, status, delete):
	msgDoesNotExist   = "does not exist"                  // "Configuration file '…/<vmid>.conf' does not exist"
	msgAlreadyExists  = "config file already exists"      // F4: clone onto a taken VMID
	msgAgentNotUp     = "QEMU guest agent is not running" // F5: booting, or the agent never came
	msgLocked         = "VM is locked"                    // F7: config write during a clone
	msgCantLock       = "can't lock file"                 // lock timeout under parallel clones
	msgLockGotTimeout = "got timeout"
)

// classify is the one place that maps a failure to its class. Errors already classified pass
// through. The cause stays reachable with errors.Is and errors.As.
func (p *Provider) classify(op, id string, err error) error {
	if err == nil {
		return nil
	}
	return providers.Wrap(classOf(op, err), op, p.name, id, err)
}

// classOf picks the class of an unclassified error. When in doubt it is Transient: every op is
// idempotent, while a wrong Permanent stops a proxy until a human edits its spec.
func classOf(op string, err error) error {
	switch {
	case errors.Is(err, errBadID), errors.Is(err, errBadRequest), errors.Is(err, errUnknownNode),
		errors.Is(err, errForeign), errors.Is(err, errNotOurs), errors.Is(err, errTwins),
		errors.Is(err, errNoTemplate), errors.Is(err, errNoBootDisk), errors.Is(err, errTokenMalformed):
		return providers.ErrPermanent
	case errors.Is(err, errGone):
		if op == opGet {
			return providers.ErrNotFound
		}
		return providers.ErrTransient
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return classOfAPI(op, ae)
	}
	// Token unreadable, network, contexts, locks, tasks, a bad answer: retrying may help.
	return providers.ErrTransient
}

// classOfAPI maps PVE's answers (docs/providers/proxmox.md, "Error classes"). No-space is not Quota: PVE's
// message for it was never captured (F6), and a guessed string would misfire.
func classOfAPI(op string, e *apiError) error {
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		// 404 is a path that never exists in this API version, not a missing VM (F2 is a 500).
		return providers.ErrPermanent
	}
	if isMissing(e) && op == opGet {
		return providers.ErrNotFound
	}
	// 500 "VM is locked", "can't lock file … got timeout", "already exists" outside the
	// allocator, other 5xx, and 595/596 (pveproxy failing to reach another node).
	return providers.ErrTransient
}

// isMissing reports PVE's answer for a VM that is not there (F2).
func isMissing(e *apiError) bool {
	return e.Status == http.StatusInternalServerError && containsMissing(e.Message)
}

// containsMissing matches F2 whole: "storage 'x' does not exist" must not read as a VM gone.
func containsMissing(msg string) bool {
	return strings.Contains(msg, msgNoConfig) && strings.Contains(msg, msgDoesNotExist)
}

// apiErr returns the apiError in err's chain.
func apiErr(err error) (*apiError, bool) {
	var ae *apiError
	ok := errors.As(err, &ae)
	return ae, ok
}

// isTaken reports a clone onto a VMID that exists (F4).
func isTaken(err error) bool {
	ae, ok := apiErr(err)
	return ok && ae.Status == http.StatusInternalServerError && strings.Contains(ae.Message, msgAlreadyExists)
}

// isGone reports a VM that does not exist, from PVE (F2) or from our own lookup.
func isGone(err error) bool {
	if errors.Is(err, errGone) {
		return true
	}
	ae, ok := apiErr(err)
	return ok && isMissing(ae)
}

// isLockContention reports the two ways PVE says a lock is held: a VM locked by a task (F7)
// and a lock file that could not be taken in time (parallel clones; bpg/terraform-provider-
// proxmox #995, #1521). Both pass once the other task ends, so the step is retried.
func isLockContention(err error) bool {
	if errors.Is(err, errLocked) {
		return true
	}
	var msg string
	if ae, ok := apiErr(err); ok && ae.Status >= 500 {
		msg = ae.Message
	} else if te, ok := errors.AsType[*taskError](err); ok {
		msg = te.exit
	} else {
		return false
	}
	return strings.Contains(msg, msgLocked) || (strings.Contains(msg, msgCantLock) && strings.Contains(msg, msgLockGotTimeout))
}

// isAgentNotRunning reports the guest agent not (yet) answering (F5): Provisioning.
func isAgentNotRunning(err error) bool {
	ae, ok := apiErr(err)
	return ok && strings.Contains(ae.Message, msgAgentNotUp)
}

// Op names, as providers.Error carries them.
const (
	opCreate = "create"
	opGet    = "get"
	opDelete = "delete"
	opList   = "list"
	opCheck  = "check"
)
