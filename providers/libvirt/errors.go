package libvirt

import (
	"errors"
	"os"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egressd/egressd/providers"
)

// Causes this package gives its errors; classify turns them into classes.
var (
	errBadID          = errors.New("malformed instance ID")
	errBadRequest     = errors.New("invalid request")
	errUnknownHost    = errors.New("host is not configured")
	errForeign        = errors.New("the name belongs to another instance")
	errNotOurs        = errors.New("not created by egressd")
	errPaused         = errors.New("domain is paused")
	errDigestChanged  = errors.New("image digest changed")
	errImageRejected  = errors.New("image rejected")
	errImageFetch     = errors.New("image download failed")
	errNoSpace        = errors.New("storage pool has no room")
	errPoolDown       = errors.New("storage pool is not running")
	errBadMarks       = errors.New("unreadable egressd metadata")
	errNotStarted     = errors.New("domain did not start")
	errNoAddressRead  = errors.New("no address source could be read")
	errLinkDead       = errors.New("connection is closed")
	errBudget         = errors.New("call exceeded its budget")
	errBusy           = errors.New("instance busy")
	errLocal          = errors.New("local I/O failed")
	errCredentials    = errors.New("SSH credentials unavailable")
	errBadCredentials = errors.New("SSH credentials unusable")
	errHostKey        = errors.New("SSH host key not trusted")
	errAuthRefused    = errors.New("SSH key refused")
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
	var (
		keyErr     *knownhosts.KeyError
		revoked    *knownhosts.RevokedError
		passphrase *ssh.PassphraseMissingError
		openErr    *ssh.OpenChannelError
	)
	switch {
	case errors.Is(err, errNoSpace):
		return providers.ErrQuota
	case errors.Is(err, errBadID), errors.Is(err, errBadRequest), errors.Is(err, errUnknownHost),
		errors.Is(err, errForeign), errors.Is(err, errNotOurs), errors.Is(err, errPaused),
		errors.Is(err, errDigestChanged), errors.Is(err, errImageRejected), errors.Is(err, errBadMarks),
		errors.Is(err, errBadCredentials), errors.Is(err, errHostKey), errors.Is(err, errAuthRefused):
		return providers.ErrPermanent
	case errors.As(err, &keyErr), errors.As(err, &revoked), errors.As(err, &passphrase):
		return providers.ErrPermanent
	case errors.As(err, &openErr):
		// sshd refusing to forward the socket at all is its configuration; a socket that is
		// not there may be a libvirtd restart.
		if openErr.Reason == ssh.Prohibited {
			return providers.ErrPermanent
		}
		return providers.ErrTransient
	case errors.Is(err, errCredentials), errors.Is(err, os.ErrNotExist):
		// A key or known_hosts file that is not there yet may be a secret still being mounted.
		return providers.ErrTransient
	case errors.Is(err, golibvirt.ErrUnsupported):
		return providers.ErrPermanent
	}
	if code, ok := libvirtCode(err); ok {
		return classOfCode(op, code)
	}
	return providers.ErrTransient
}

// classOfCode maps libvirt's error numbers. A missing domain is NotFound only for Get:
// Create never says NotFound, and Delete of a missing domain succeeds.
func classOfCode(op string, code golibvirt.ErrorNumber) error {
	switch code {
	case golibvirt.ErrNoDomain:
		if op == opGet {
			return providers.ErrNotFound
		}
		return providers.ErrTransient
	case golibvirt.ErrNoStoragePool, golibvirt.ErrXMLError, golibvirt.ErrXMLDetail,
		golibvirt.ErrXMLInvalidSchema, golibvirt.ErrNoSupport, golibvirt.ErrInvalidArg,
		golibvirt.ErrInvalidMac, golibvirt.ErrAuthFailed, golibvirt.ErrAccessDenied,
		golibvirt.ErrOperationDenied, golibvirt.ErrConfigUnsupported,
		golibvirt.ErrOperationUnsupported, golibvirt.ErrArgumentUnsupported:
		return providers.ErrPermanent
	case golibvirt.ErrNoNetwork:
		// A domain on a network that does not exist can never start; elsewhere it only
		// means no lease source.
		if op == opCreate {
			return providers.ErrPermanent
		}
		return providers.ErrTransient
	}
	return providers.ErrTransient
}

// libvirtCode returns the libvirt error number in err's chain, if libvirt answered.
func libvirtCode(err error) (golibvirt.ErrorNumber, bool) {
	var le golibvirt.Error
	if errors.As(err, &le) {
		return golibvirt.ErrorNumber(le.Code), true
	}
	return 0, false
}

// isCode reports whether libvirt answered err with code.
func isCode(err error, code golibvirt.ErrorNumber) bool {
	c, ok := libvirtCode(err)
	return ok && c == code
}

// Op names, as providers.Error carries them.
const (
	opCreate = "create"
	opGet    = "get"
	opDelete = "delete"
	opList   = "list"
	opCheck  = "check"
)
