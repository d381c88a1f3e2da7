package gcp

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
)

// Get reads the instance back: marks and port from its labels, state and address from the
// service. When the instance is not there, its newest insert operation says why:
//
//	instance / insert operation          Instance state or error
//	PROVISIONING, STAGING, REPAIRING     Provisioning
//	RUNNING with an address              Running (natIP, or networkIP with externalIP none)
//	RUNNING without one                  Provisioning
//	STOPPING, STOPPED, SUSPENDING,
//	SUSPENDED, anything else             Stopped
//	TERMINATED (a Spot VM preempted)     Terminated
//	absent, insert PENDING or RUNNING    Provisioning (accepted, not visible yet)
//	absent, insert DONE with an error    the error, classified: QUOTA_EXCEEDED and stockouts
//	                                     (ZONE_RESOURCE_POOL_EXHAUSTED) are Quota
//	absent, insert DONE, or none found   NotFound
func (p *Provider) Get(ctx context.Context, id string) (providers.Instance, error) {
	zone, name, err := p.parseID(id)
	if err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	inst, err := p.get(ctx, id, zone, name)
	return inst, p.classify(opGet, id, err)
}

func (p *Provider) get(ctx context.Context, id, zone, name string) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	defer release()
	inst, err := p.read(ctx, c, zone, name)
	if err == nil {
		out := p.describe(id, inst)
		p.log.Debug("gcp instance fetched", "zone", zone, "name", name, "status", inst.GetStatus(), "state", out.State, "address", out.Address)
		return out, nil
	}
	if !isCode(err, http.StatusNotFound) {
		return providers.Instance{}, err
	}
	op, err := p.lastInsert(ctx, c, zone, name)
	if err != nil {
		return providers.Instance{}, err
	}
	switch {
	case op == nil:
		return providers.Instance{}, fmt.Errorf("instance %s in zone %s: %w", name, zone, errGone)
	case op.GetStatus() != computepb.Operation_DONE:
		return providers.Instance{ID: id, Name: name, Host: zone, State: providers.StateProvisioning}, nil
	}
	if oe := opErrorOf(op); oe != nil {
		p.log.Info("gcp insert failed after it was accepted", "zone", zone, "name", name, "operation", op.GetName(), "code", oe.Code)
		return providers.Instance{}, fmt.Errorf("instance %s in zone %s was not created: %w", name, zone, oe)
	}
	return providers.Instance{}, fmt.Errorf("instance %s in zone %s: %w", name, zone, errGone)
}

// read gets the instance, within the call budget.
func (p *Provider) read(ctx context.Context, c *clients, zone, name string) (*computepb.Instance, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	return c.inst.Get(cctx, &computepb.GetInstanceRequest{Project: p.cfg.Project, Zone: zone, Instance: name})
}

// lastInsert is the newest insert operation of the instance's URL, nil when the zone keeps
// none.
func (p *Provider) lastInsert(ctx context.Context, c *clients, zone, name string) (*computepb.Operation, error) {
	ops, err := p.insertOps(ctx, c, zone, name)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	return ops[len(ops)-1], nil
}

// insertOps are the insert operations of the instance's URL the zone keeps, oldest first
// (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/list, filter).
func (p *Provider) insertOps(ctx context.Context, c *clients, zone, name string) ([]*computepb.Operation, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	filter := fmt.Sprintf(`(targetLink = "%s") AND (operationType = "insert")`, p.instanceURL(zone, name))
	it := c.zops.List(cctx, &computepb.ListZoneOperationsRequest{Project: p.cfg.Project, Zone: zone, Filter: proto.String(filter)})
	var ops []*computepb.Operation
	for {
		op, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	slices.SortStableFunc(ops, func(a, b *computepb.Operation) int {
		return cmp.Or(cmp.Compare(a.GetInsertTime(), b.GetInsertTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	return ops, nil
}

// describe turns an instance resource into the contract's Instance, with the ID asked for.
func (p *Provider) describe(id string, inst *computepb.Instance) providers.Instance {
	out := providers.Instance{ID: id, Name: inst.GetName(), Host: zoneOf(inst.GetZone()), Marks: marksOf(inst.GetLabels())}
	out.Port, _ = strconv.Atoi(inst.GetLabels()[labelPort])
	nat, internal := addresses(inst)
	addr := nat
	if p.cfg.ExternalIP == ExternalIPNone {
		addr = internal
	}
	switch inst.GetStatus() {
	case "PROVISIONING", "STAGING", "REPAIRING":
		out.State = providers.StateProvisioning
	case "RUNNING":
		out.State = providers.StateProvisioning
		if addr != "" && out.Port > 0 {
			out.State, out.Address, out.EgressIP = providers.StateRunning, addr, nat
		}
	case "TERMINATED":
		out.State = providers.StateTerminated
	default:
		out.State = providers.StateStopped
	}
	return out
}

// addresses are the first NIC's external (natIP of its first access config) and internal
// addresses, each "" unless an IP.
func addresses(inst *computepb.Instance) (nat, internal string) {
	nics := inst.GetNetworkInterfaces()
	if len(nics) == 0 {
		return "", ""
	}
	if acs := nics[0].GetAccessConfigs(); len(acs) > 0 && isIP(acs[0].GetNatIP()) {
		nat = acs[0].GetNatIP()
	}
	if isIP(nics[0].GetNetworkIP()) {
		internal = nics[0].GetNetworkIP()
	}
	return nat, internal
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// zoneOf is the last segment of a zone URL.
func zoneOf(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}
