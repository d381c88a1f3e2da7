package gcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
)

// List returns every instance, in every zone of the project, that carries egressd's managed
// mark and this provider's name, with its marks (one aggregatedList, filtered on the
// labels). A zone the service could not reach fails the whole call: the SDK's request has no
// returnPartialSuccess, and the answer then carries the zone's UNREACHABLE warning instead of
// its instances (or, in the partial-success shape, names it in unreachables under a
// PARTIAL_SUCCESS warning: both are read); garbage collection must not mistake a partial
// list for the truth.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, p.classify(opList, "", err)
	}
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	defer release()
	insts, err := p.listInstances(ctx, c, "")
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	out := make([]providers.Instance, 0, len(insts))
	for _, inst := range insts {
		zone := zoneOf(inst.GetZone())
		out = append(out, p.describe(idOf(zone, inst.GetName()), inst))
	}
	slices.SortFunc(out, func(a, b providers.Instance) int { return strings.Compare(a.ID, b.ID) })
	p.log.Debug("gcp instances listed", "managed", len(out))
	return out, nil
}

// Warning codes of an answer that is not the whole truth: a scope the service could not
// reach, or results missing for other errors.
const (
	unreachable    = "UNREACHABLE"
	partialSuccess = "PARTIAL_SUCCESS"
)

func incomplete(w *computepb.Warning) bool {
	return w.GetCode() == unreachable || w.GetCode() == partialSuccess
}

// listInstances lists this provider's managed instances, with one more filter term if extra
// is not "". It pages itself (InternalFetch, as the SDK's iterator does) so that it reads
// every page's own answer: a zone may be reported missing in its scope's warning, or only in
// the answer's unreachables and warning, and either way the list fails.
func (p *Provider) listInstances(ctx context.Context, c *clients, extra string) ([]*computepb.Instance, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	filter := fmt.Sprintf(`(labels.%s = "true") AND (labels.%s = "%s")`, labelManaged, labelProvider, p.name)
	if extra != "" {
		filter += " AND (labels." + extra + ")"
	}
	it := c.inst.AggregatedList(cctx, &computepb.AggregatedListInstancesRequest{Project: p.cfg.Project, Filter: proto.String(filter)})
	var out []*computepb.Instance
	var down []string
	for token := ""; ; {
		pairs, next, err := it.InternalFetch(0, token)
		if err != nil {
			return nil, err
		}
		if page, ok := it.Response.(*computepb.InstanceAggregatedList); ok {
			down = append(down, page.GetUnreachables()...)
			if incomplete(page.GetWarning()) && len(page.GetUnreachables()) == 0 {
				down = append(down, "the answer ("+page.GetWarning().GetCode()+")")
			}
		}
		for _, pair := range pairs {
			if incomplete(pair.Value.GetWarning()) {
				down = append(down, pair.Key)
				continue
			}
			out = append(out, pair.Value.GetInstances()...)
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(down) > 0 {
		slices.Sort(down)
		return nil, fmt.Errorf("%w: %s unreachable", errPartialList, strings.Join(slices.Compact(down), ", "))
	}
	return out, nil
}
