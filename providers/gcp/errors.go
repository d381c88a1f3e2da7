package gcp

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/api/googleapi"

	"github.com/egressd/egressd/providers"
)

// Causes this package gives its errors; classify turns them into classes.
var (
	errBadID           = errors.New("malformed instance ID")
	errBadRequest      = errors.New("invalid request")
	errUnknownZone     = errors.New("zone is not configured")
	errForeign         = errors.New("the name belongs to another instance")
	errNotOurs         = errors.New("not created by egressd")
	errBusy            = errors.New("instance busy")
	errInserting       = errors.New("an insert of this name is in progress")
	errBadCredentials  = errors.New("credentials unusable")
	errNoCredentials   = errors.New("credentials unavailable")
	errPartialList     = errors.New("a zone could not be listed")
	errForeignFirewall = errors.New("the firewall rule belongs to someone else")
	errGone            = errors.New("instance is gone")
)

// opError is a failed operation's error.errors[0]: how an insert that was accepted fails
// later (quota, stockout), which Operation.Wait does not always report.
type opError struct {
	Op         string // the operation's name
	Code       string // QUOTA_EXCEEDED, ZONE_RESOURCE_POOL_EXHAUSTED, ...
	Message    string
	HTTPStatus int // httpErrorStatusCode, 0 when absent
}

func (e *opError) Error() string {
	if stockout(e.Code) {
		return fmt.Sprintf("stockout: the zone has no capacity for this machine type now; trying again later (operation %s: %s: %s)", e.Op, e.Code, e.Message)
	}
	return fmt.Sprintf("operation %s failed: %s: %s", e.Op, e.Code, e.Message)
}

// Operation error codes (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability
// and the API's error messages).
const (
	codeQuotaExceeded       = "QUOTA_EXCEEDED"
	codeZoneExhausted       = "ZONE_RESOURCE_POOL_EXHAUSTED"
	codeZoneExhaustedDetail = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
	codeRegionExhausted     = "REGION_RESOURCE_POOL_EXHAUSTED"
	codeRateExceeded        = "RESOURCE_OPERATION_RATE_EXCEEDED"
	codeNotFound            = "RESOURCE_NOT_FOUND"
	codeAlreadyExists       = "RESOURCE_ALREADY_EXISTS"
	codeInvalidField        = "INVALID_FIELD_VALUE"
	codeInvalidUsage        = "INVALID_USAGE"
	codeFieldMissing        = "REQUIRED_FIELD_MISSING"
	codeUnsupported         = "UNSUPPORTED_OPERATION"
	codePermissionDenied    = "PERMISSION_DENIED"
	codeBadRequest          = "BAD_REQUEST"
)

func stockout(code string) bool {
	return code == codeZoneExhausted || code == codeZoneExhaustedDetail || code == codeRegionExhausted
}

// googleapi reasons (Errors[].Reason, https://cloud.google.com/compute/docs/api/handle-api-errors).
const (
	reasonQuotaExceeded     = "quotaExceeded"
	reasonRateLimitExceeded = "rateLimitExceeded"
	reasonUserRateLimit     = "userRateLimitExceeded"
	reasonAlreadyExists     = "alreadyExists"
	reasonNotFound          = "notFound"
)

// classify is the one place that maps a failure to its class. Errors already classified pass
// through; the cause stays reachable with errors.Is and errors.As.
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
		ge *googleapi.Error
		oe *opError
	)
	switch {
	case errors.Is(err, errBadID), errors.Is(err, errBadRequest), errors.Is(err, errUnknownZone),
		errors.Is(err, errForeign), errors.Is(err, errNotOurs), errors.Is(err, errBadCredentials),
		errors.Is(err, errForeignFirewall):
		return providers.ErrPermanent
	case errors.Is(err, errGone):
		if op == opGet {
			return providers.ErrNotFound
		}
		return providers.ErrTransient
	case errors.Is(err, errBusy), errors.Is(err, errInserting):
		// Whatever the service said on the way (an operation gone from under a poll).
		return providers.ErrTransient
	case errors.Is(err, errNoCredentials), errors.Is(err, os.ErrNotExist):
		// A credentials file not there yet may be a secret still being mounted.
		return providers.ErrTransient
	case errors.As(err, &oe):
		return classOfOperation(oe)
	case errors.As(err, &ge):
		return classOfAPI(op, ge)
	}
	return providers.ErrTransient
}

// classOfAPI maps a googleapi error by HTTP code and reason. NotFound only for Get: Create
// never says NotFound (a 404 there is a missing image, network or project), and Delete of a
// missing instance succeeds before this is reached. Quota never for Get: a Get answering
// Quota tells the reconciler the instance could not be made and is gone (an insert's
// operation failed), while a refused read (instances.get, zoneOperations.list) says nothing
// about the instance, which may well be running.
func classOfAPI(op string, ge *googleapi.Error) error {
	switch {
	case hasReason(ge, reasonQuotaExceeded) && op == opGet:
		return providers.ErrTransient
	case hasReason(ge, reasonQuotaExceeded):
		return providers.ErrQuota
	case hasReason(ge, reasonRateLimitExceeded), hasReason(ge, reasonUserRateLimit):
		// Calls per minute: backing off (1, 2, 4 s...) is the cure, not a 5-minute wait.
		return providers.ErrTransient
	}
	switch code := ge.Code; {
	case code == http.StatusNotFound && op == opGet:
		return providers.ErrNotFound
	case code == http.StatusNotFound && (op == opCreate || op == opList || op == opCheck):
		return providers.ErrPermanent
	case code == http.StatusTooManyRequests, code == http.StatusConflict, code == http.StatusPreconditionFailed,
		code == http.StatusRequestTimeout, code >= 500:
		return providers.ErrTransient
	case code == http.StatusBadRequest, code == http.StatusUnauthorized, code == http.StatusForbidden:
		return providers.ErrPermanent
	}
	return providers.ErrTransient
}

// classOfOperation maps an asynchronous failure. Quota and stockouts are Quota (wait, then
// try again); a request the service refused for what it says is Permanent; the rest by the
// HTTP status the operation carries.
func classOfOperation(oe *opError) error {
	switch {
	case oe.Code == codeQuotaExceeded, stockout(oe.Code), oe.Code == codeRateExceeded:
		return providers.ErrQuota
	case oe.Code == codeNotFound, oe.Code == codeInvalidField, oe.Code == codeInvalidUsage,
		oe.Code == codeFieldMissing, oe.Code == codeUnsupported, oe.Code == codePermissionDenied,
		oe.Code == codeBadRequest:
		return providers.ErrPermanent
	case oe.Code == codeAlreadyExists:
		return providers.ErrTransient
	case oe.HTTPStatus == http.StatusTooManyRequests, oe.HTTPStatus == http.StatusConflict, oe.HTTPStatus == http.StatusPreconditionFailed:
		return providers.ErrTransient
	case oe.HTTPStatus >= 400 && oe.HTTPStatus < 500:
		return providers.ErrPermanent
	}
	return providers.ErrTransient
}

func hasReason(ge *googleapi.Error, reason string) bool {
	for _, e := range ge.Errors {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// isCode reports whether err is a googleapi error with this HTTP code.
func isCode(err error, code int) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == code
}

// Op names, as providers.Error carries them.
const (
	opCreate = "create"
	opGet    = "get"
	opDelete = "delete"
	opList   = "list"
	opCheck  = "check"
)
