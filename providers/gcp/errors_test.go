package gcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"google.golang.org/api/googleapi"

	"github.com/egressd/egressd/providers"
)

func apiErr(code int, reason string) error {
	return fmt.Errorf("call: %w", &googleapi.Error{Code: code, Message: "the service says no",
		Errors: []googleapi.ErrorItem{{Reason: reason, Message: "the service says no"}}})
}

func opErr(code string, status int) error {
	return &opError{Op: "operation-1", Code: code, Message: "it failed", HTTPStatus: status}
}

// classify on every code and reason the provider meets, by type (errors.As), never by text.
func TestClassify(t *testing.T) {
	p := &Provider{name: "gce"}
	for _, c := range []struct {
		op   string
		err  error
		want error
	}{
		// googleapi errors: HTTP codes and reasons
		{opGet, apiErr(404, reasonNotFound), providers.ErrNotFound},
		{opCreate, apiErr(404, reasonNotFound), providers.ErrPermanent}, // a missing image, network or project
		{opList, apiErr(404, reasonNotFound), providers.ErrPermanent},
		{opDelete, apiErr(404, reasonNotFound), providers.ErrTransient}, // Delete never says NotFound
		{opCreate, apiErr(403, reasonQuotaExceeded), providers.ErrQuota},
		// A refused read is not an instance that could not be made: Quota from Get ends the
		// instance in the reconciler's eyes (docs/decisions/0068-gcp-insert-operations.md),
		// and it may be running.
		{opGet, apiErr(403, reasonQuotaExceeded), providers.ErrTransient},
		{opDelete, apiErr(403, reasonQuotaExceeded), providers.ErrQuota},
		{opCreate, apiErr(403, reasonRateLimitExceeded), providers.ErrTransient},
		{opCreate, apiErr(403, reasonUserRateLimit), providers.ErrTransient},
		{opCreate, apiErr(429, reasonRateLimitExceeded), providers.ErrTransient},
		{opCreate, apiErr(429, ""), providers.ErrTransient},
		{opCreate, apiErr(403, "forbidden"), providers.ErrPermanent},
		{opCreate, apiErr(403, "accessNotConfigured"), providers.ErrPermanent},
		{opCreate, apiErr(401, "authError"), providers.ErrPermanent},
		{opCreate, apiErr(400, "invalid"), providers.ErrPermanent},
		{opCreate, apiErr(400, "badRequest"), providers.ErrPermanent},
		{opCreate, apiErr(409, reasonAlreadyExists), providers.ErrTransient},
		{opCreate, apiErr(412, "conditionNotMet"), providers.ErrTransient},
		{opCreate, apiErr(408, ""), providers.ErrTransient},
		{opCreate, apiErr(500, "backendError"), providers.ErrTransient},
		{opCreate, apiErr(503, "backendError"), providers.ErrTransient},
		{opGet, apiErr(502, ""), providers.ErrTransient},
		{opGet, apiErr(418, ""), providers.ErrTransient},
		// asynchronous operation errors
		{opGet, opErr(codeQuotaExceeded, 0), providers.ErrQuota},
		{opGet, opErr(codeQuotaExceeded, 403), providers.ErrQuota},
		{opGet, opErr(codeZoneExhausted, 503), providers.ErrQuota},
		{opGet, opErr(codeZoneExhaustedDetail, 503), providers.ErrQuota},
		{opGet, opErr(codeRegionExhausted, 0), providers.ErrQuota},
		{opGet, opErr(codeRateExceeded, 0), providers.ErrQuota},
		{opCreate, opErr(codeNotFound, 404), providers.ErrPermanent},
		{opGet, opErr(codeInvalidField, 400), providers.ErrPermanent},
		{opGet, opErr(codeInvalidUsage, 0), providers.ErrPermanent},
		{opGet, opErr(codeFieldMissing, 0), providers.ErrPermanent},
		{opGet, opErr(codeUnsupported, 0), providers.ErrPermanent},
		{opGet, opErr(codePermissionDenied, 403), providers.ErrPermanent},
		{opGet, opErr(codeBadRequest, 0), providers.ErrPermanent},
		{opGet, opErr(codeAlreadyExists, 409), providers.ErrTransient},
		{opGet, opErr("INTERNAL_ERROR", 500), providers.ErrTransient},
		{opGet, opErr("SOMETHING_NEW", 0), providers.ErrTransient},
		{opGet, opErr("SOMETHING_NEW", 400), providers.ErrPermanent},
		{opGet, opErr("SOMETHING_NEW", 429), providers.ErrTransient},
		{opGet, opErr("SOMETHING_NEW", 412), providers.ErrTransient},
		// this package's causes
		{opGet, errBadID, providers.ErrPermanent},
		{opGet, errUnknownZone, providers.ErrPermanent},
		{opCreate, errBadRequest, providers.ErrPermanent},
		{opCreate, errForeign, providers.ErrPermanent},
		{opCreate, errForeignFirewall, providers.ErrPermanent},
		{opDelete, errNotOurs, providers.ErrPermanent},
		{opCreate, errBadCredentials, providers.ErrPermanent},
		{opCreate, fmt.Errorf("%w: %w", errNoCredentials, os.ErrNotExist), providers.ErrTransient},
		{opCreate, errBusy, providers.ErrTransient},
		{opCreate, errInserting, providers.ErrTransient},
		{opCreate, fmt.Errorf("%w: operation gone: %w", errInserting, apiErr(404, reasonNotFound)), providers.ErrTransient},
		{opList, errPartialList, providers.ErrTransient},
		{opGet, errGone, providers.ErrNotFound},
		{opCreate, errGone, providers.ErrTransient},
		// context and the rest
		{opList, context.Canceled, providers.ErrTransient},
		{opGet, context.DeadlineExceeded, providers.ErrTransient},
		{opGet, errors.New("something else"), providers.ErrTransient},
		// already classified errors keep their class
		{opCreate, providers.Errorf(providers.ErrQuota, "create", "other", "x", "kept"), providers.ErrQuota},
	} {
		got := p.classify(c.op, "zones/z/instances/x", c.err)
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
		{ended, apiErr(500, ""), ReasonTimeout},
		{live, context.DeadlineExceeded, ReasonTimeout},
		{live, fmt.Errorf("%w: gone", errNoCredentials), ReasonCredentialsUnavailable},
		{live, fmt.Errorf("%w: bad", errBadCredentials), ReasonCredentialsInvalid},
		{live, apiErr(401, "authError"), ReasonUnauthorized},
		{live, apiErr(403, "forbidden"), ReasonForbidden},
		{live, apiErr(403, reasonRateLimitExceeded), ReasonRateLimited},
		{live, apiErr(429, ""), ReasonRateLimited},
		{live, apiErr(404, reasonNotFound), ReasonProjectNotFound},
		{live, apiErr(500, "backendError"), ReasonAPIError},
		{live, errors.New("dial tcp: connection refused"), ReasonUnreachable},
	} {
		if got := checkReason(c.ctx, c.err); got != c.want {
			t.Errorf("checkReason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// The opError message says what a human needs: stockout in words, the code, the message.
func TestOpErrorMessage(t *testing.T) {
	if got := opErr(codeZoneExhausted, 503).Error(); got != "stockout: the zone has no capacity for this machine type now; trying again later (operation operation-1: ZONE_RESOURCE_POOL_EXHAUSTED: it failed)" {
		t.Errorf("stockout message %q", got)
	}
	if got := opErr(codeQuotaExceeded, 0).Error(); got != "operation operation-1 failed: QUOTA_EXCEEDED: it failed" {
		t.Errorf("quota message %q", got)
	}
}
