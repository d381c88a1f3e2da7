package kubernetes

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/egressd/egressd/providers"
)

// Causes this package gives its errors; classify turns them into classes.
var (
	errBadID         = errors.New("malformed instance ID")
	errBadRequest    = errors.New("invalid request")
	errUnknownTarget = errors.New("target is not configured")
	errForeign       = errors.New("the name belongs to another proxy")
	errNotOurs       = errors.New("not created by this provider")
	errNoFreeNode    = errors.New("no free node")
	errGone          = errors.New("pod does not exist")
	errBusy          = errors.New("instance busy")
	errNodeRace      = errors.New("lost the node to another proxy")
)

// Ops, as errors name them.
const (
	opCreate = "create"
	opGet    = "get"
	opDelete = "delete"
	opList   = "list"
	opCheck  = "check"
)

// msgExceededQuota is how the ResourceQuota admission plugin words a refusal
// (k8s.io/apiserver/pkg/admission/plugin/resourcequota: "exceeded quota: %s, requested: …"),
// inside a 403 Forbidden.
const msgExceededQuota = "exceeded quota"

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
	case errors.Is(err, errBadID), errors.Is(err, errBadRequest), errors.Is(err, errUnknownTarget),
		errors.Is(err, errForeign), errors.Is(err, errNotOurs), errors.Is(err, errMissing):
		return providers.ErrPermanent
	case errors.Is(err, errNoFreeNode):
		return providers.ErrQuota
	case errors.Is(err, errGone):
		if op == opGet {
			return providers.ErrNotFound
		}
		return providers.ErrTransient
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return providers.ErrTransient
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return providers.ErrTransient // the network, a bad answer: retrying may help
	}
	return classOfAPI(op, err)
}

// classOfAPI maps the API server's answers (docs/providers/kubernetes.md, "Error classes").
func classOfAPI(op string, err error) error {
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), msgExceededQuota):
		return providers.ErrQuota
	case apierrors.IsNotFound(err) && op == opGet:
		return providers.ErrNotFound
	case apierrors.IsNotFound(err):
		// Outside Get a 404 is the namespace (or the API) missing: config, not the pod.
		return providers.ErrPermanent
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		// RBAC, PodSecurity admission, a field the API refuses: retrying sends the same.
		return providers.ErrPermanent
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), apierrors.IsGone(err):
		// A race with another writer: the next attempt reads the object again.
		return providers.ErrTransient
	case apierrors.IsTooManyRequests(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnauthorized(err):
		// Unauthorized too: a rotated service-account token is read again by the client.
		return providers.ErrTransient
	}
	return providers.ErrTransient
}
