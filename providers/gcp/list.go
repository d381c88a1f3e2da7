package gcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
)

// List returns every instance, in every zone of the project, that carries egressd's managed
// mark and this provider's name, with its marks (one aggregatedList, filtered on the
// labels). A zone the service could not reach fails the whole call: the SDK's request has no
// returnPartialSuccess, and the answer then carries the zone's UNREACHABLE warning instead of
// its instances; garbage collection must not mistake a partial list for the truth.
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

// unreachable is the warning code of a scope the service could not reach.
const unreachable = "UNREACHABLE"

// listInstances lists this provider's managed instances, with one more filter term if extra
// is not "".
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
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, err
		}
		if pair.Value.GetWarning().GetCode() == unreachable {
			down = append(down, pair.Key)
			continue
		}
		out = append(out, pair.Value.GetInstances()...)
	}
	if len(down) > 0 {
		slices.Sort(down)
		return nil, fmt.Errorf("%w: %s unreachable", errPartialList, strings.Join(down, ", "))
	}
	return out, nil
}
