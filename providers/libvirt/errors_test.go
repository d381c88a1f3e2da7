package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egressd/egressd/providers"
)

func TestClassify(t *testing.T) {
	p := &Provider{name: "lv"}
	code := func(c golibvirt.ErrorNumber) error { return fmt.Errorf("Some call: %w", lverr(c, "libvirt says no")) }
	for _, c := range []struct {
		op   string
		err  error
		want error
	}{
		// libvirt's answers
		{opGet, code(golibvirt.ErrNoDomain), providers.ErrNotFound},
		{opCreate, code(golibvirt.ErrNoDomain), providers.ErrTransient}, // Create never says NotFound
		{opDelete, code(golibvirt.ErrNoDomain), providers.ErrTransient},
		{opCreate, code(golibvirt.ErrNoStorageVol), providers.ErrTransient},
		{opCreate, code(golibvirt.ErrNoStoragePool), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrXMLError), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrConfigUnsupported), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrOperationUnsupported), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrAccessDenied), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrAuthFailed), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrInvalidArg), providers.ErrPermanent},
		{opCreate, code(golibvirt.ErrNoNetwork), providers.ErrPermanent},
		{opGet, code(golibvirt.ErrNoNetwork), providers.ErrTransient},
		{opCreate, code(golibvirt.ErrOperationInvalid), providers.ErrTransient},
		{opCreate, code(golibvirt.ErrInternalError), providers.ErrTransient},
		{opCreate, code(golibvirt.ErrAgentUnresponsive), providers.ErrTransient},
		{opCreate, golibvirt.ErrUnsupported, providers.ErrPermanent},
		// transport and context
		{opGet, golibvirt.ErrInterrupted, providers.ErrTransient},
		{opGet, fmt.Errorf("x: %w", errLinkDead), providers.ErrTransient},
		{opGet, fmt.Errorf("x: %w", errBudget), providers.ErrTransient},
		{opGet, io.EOF, providers.ErrTransient},
		{opList, context.Canceled, providers.ErrTransient},
		{opList, context.DeadlineExceeded, providers.ErrTransient},
		{opGet, errNoAddressRead, providers.ErrTransient},
		// SSH
		{opCreate, &dialError{Stage: stageCredentials, Err: fmt.Errorf("%w: %w", errCredentials, os.ErrNotExist)}, providers.ErrTransient},
		{opCreate, &dialError{Stage: stageCredentials, Err: fmt.Errorf("%w: bad key", errBadCredentials)}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSSH, Err: fmt.Errorf("ssh: handshake failed: %w", fmt.Errorf("%w: unknown", errHostKey))}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSSH, Err: &knownhosts.KeyError{}}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSSH, Err: &knownhosts.RevokedError{}}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSSH, Err: fmt.Errorf("%w: refused", errAuthRefused)}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSSH, Err: io.EOF}, providers.ErrTransient},
		{opCreate, &dialError{Stage: stageTCP, Err: errors.New("connection refused")}, providers.ErrTransient},
		{opCreate, &dialError{Stage: stageSocket, Err: &ssh.OpenChannelError{Reason: ssh.Prohibited}}, providers.ErrPermanent},
		{opCreate, &dialError{Stage: stageSocket, Err: &ssh.OpenChannelError{Reason: ssh.ConnectionFailed}}, providers.ErrTransient},
		// this package's causes
		{opCreate, errNoSpace, providers.ErrQuota},
		{opCreate, errPoolDown, providers.ErrTransient},
		{opCreate, errBadRequest, providers.ErrPermanent},
		{opGet, errBadID, providers.ErrPermanent},
		{opGet, errUnknownHost, providers.ErrPermanent},
		{opCreate, errForeign, providers.ErrPermanent},
		{opDelete, errNotOurs, providers.ErrPermanent},
		{opCreate, errPaused, providers.ErrPermanent},
		{opCreate, errDigestChanged, providers.ErrPermanent},
		{opCreate, errImageRejected, providers.ErrPermanent},
		{opCreate, errImageFetch, providers.ErrTransient},
		{opCreate, errLocal, providers.ErrTransient},
		{opCreate, errBusy, providers.ErrTransient},
		{opCreate, errNotStarted, providers.ErrTransient},
		{opCreate, errors.New("something else"), providers.ErrTransient},
		// already classified errors keep their class
		{opCreate, providers.Errorf(providers.ErrQuota, "create", "other", "x", "kept"), providers.ErrQuota},
	} {
		got := p.classify(c.op, "hosts/h1/domains/x", c.err)
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("classify(%s, %v) = %v, want class %q with the cause kept", c.op, c.err, got, c.want)
		}
	}
	if p.classify(opGet, "x", nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

func TestCheckReason(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want providers.CheckReason
	}{
		{ended, &dialError{Stage: stageTCP, Err: context.Canceled}, ReasonTimeout},
		{live, &dialError{Stage: stageCredentials, Err: errCredentials}, ReasonCredentialsUnavailable},
		{live, &dialError{Stage: stageSSH, Err: errHostKey}, ReasonUnauthorized},
		{live, &dialError{Stage: stageSSH, Err: errAuthRefused}, ReasonUnauthorized},
		{live, &dialError{Stage: stageSSH, Err: io.EOF}, ReasonUnreachable},
		{live, &dialError{Stage: stageTCP, Err: context.DeadlineExceeded}, ReasonUnreachable},
		{live, &dialError{Stage: stageSocket, Err: &ssh.OpenChannelError{Reason: ssh.Prohibited}}, ReasonForbidden},
		{live, &dialError{Stage: stageSocket, Err: lverr(golibvirt.ErrAccessDenied, "denied")}, ReasonForbidden},
		{live, fmt.Errorf("x: %w", errBudget), ReasonTimeout},
		{live, lverr(golibvirt.ErrNoStoragePool, "no pool"), ReasonPoolNotFound},
		{live, errPoolDown, ReasonPoolNotActive},
		{live, lverr(golibvirt.ErrInternalError, "oops"), ReasonAPIError},
		{live, errLinkDead, ReasonUnreachable},
	} {
		if got := checkReason(c.ctx, c.err); got != c.want {
			t.Errorf("checkReason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
