package gcp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
)

// Check reasons: the shared ones under this provider's names, and its own.
const (
	ReasonReachable                                    = providers.CheckReachable
	ReasonZoneUnreachable        providers.CheckReason = "ZoneUnreachable"
	ReasonCredentialsUnavailable                       = providers.CheckCredentialsUnavailable
	ReasonCredentialsInvalid                           = providers.CheckCredentialsInvalid
	ReasonUnreachable                                  = providers.CheckUnreachable
	ReasonUnauthorized                                 = providers.CheckUnauthorized
	ReasonForbidden                                    = providers.CheckForbidden
	ReasonProjectNotFound        providers.CheckReason = "ProjectNotFound"
	ReasonRateLimited                                  = providers.CheckRateLimited
	ReasonTimeout                                      = providers.CheckTimeout
	ReasonAPIError                                     = providers.CheckAPIError
)

// checkAddress is what a target's Address says: the API it reaches.
const checkAddress = "compute.googleapis.com"

// Check reports one target per zone, in config order, from one aggregatedList page (at most
// one instance, the managed filter): the credential, the project and the permission to list
// are the same for every zone, and a zone the service cannot reach carries its UNREACHABLE
// warning. It takes no lock of Create or Delete.
func (p *Provider) Check(ctx context.Context) []providers.TargetStatus {
	start := time.Now()
	down, err := p.probe(ctx)
	latency := time.Since(start)
	out := make([]providers.TargetStatus, 0, len(p.cfg.Zones))
	for _, z := range p.cfg.Zones {
		ts := providers.TargetStatus{Name: z.Name, Address: checkAddress, Latency: latency,
			Details: map[string]string{"project": p.cfg.Project}}
		switch {
		case err != nil:
			ts.Reason, ts.Message = checkReason(ctx, err), p.classify(opCheck, "", err).Error()
		case down[z.Name]:
			ts.Reason, ts.Message = ReasonZoneUnreachable, "the service reports zone "+z.Name+" unreachable"
		default:
			ts.Ready, ts.Reason = true, ReasonReachable
		}
		out = append(out, ts)
	}
	p.log.Debug("gcp project checked", "ready", err == nil, "latency", latency)
	return out
}

// probe fetches one page of the managed instances and returns the zones it says are down.
func (p *Provider) probe(ctx context.Context) (map[string]bool, error) {
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	cctx, cancel := p.call(ctx)
	defer cancel()
	it := c.inst.AggregatedList(cctx, &computepb.AggregatedListInstancesRequest{Project: p.cfg.Project, MaxResults: proto.Uint32(1),
		Filter: proto.String(`labels.` + labelManaged + ` = "true"`)})
	pairs, _, err := it.InternalFetch(1, "")
	if err != nil {
		return nil, err
	}
	down := map[string]bool{}
	for _, pair := range pairs {
		if incomplete(pair.Value.GetWarning()) {
			down[zoneOf(pair.Key)] = true
		}
	}
	if page, ok := it.Response.(*computepb.InstanceAggregatedList); ok {
		for _, scope := range page.GetUnreachables() { // the partial-success shape (list.go)
			down[zoneOf(scope)] = true
		}
	}
	return down, nil
}

// checkReason names why the check failed. The round's own deadline wins: a check cut short
// says nothing about the project.
func checkReason(ctx context.Context, err error) providers.CheckReason {
	var ge *googleapi.Error
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, errNoCredentials):
		return ReasonCredentialsUnavailable
	case errors.Is(err, errBadCredentials):
		return ReasonCredentialsInvalid
	case errors.As(err, &ge):
		switch {
		case ge.Code == http.StatusUnauthorized:
			return ReasonUnauthorized
		case ge.Code == http.StatusForbidden && (hasReason(ge, reasonRateLimitExceeded) || hasReason(ge, reasonUserRateLimit)),
			ge.Code == http.StatusTooManyRequests:
			return ReasonRateLimited
		case ge.Code == http.StatusForbidden:
			return ReasonForbidden
		case ge.Code == http.StatusNotFound:
			return ReasonProjectNotFound
		}
		return ReasonAPIError
	}
	// No answer from the API: the network, or the token endpoint.
	return ReasonUnreachable
}
