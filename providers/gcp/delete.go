package gcp

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// Delete deletes the instance (its boot disk goes with it, autoDelete; an ephemeral address is
// released by the service), waits for the deletion up to budgets.delete, and then deletes the
// firewall rule it used if no other instance uses it. An instance whose insert is still
// pending is waited for first, so that a Delete right after a Create does not miss it. An
// instance of that name without egressd's mark is refused, not deleted: an ID is only a
// string, and it must not be enough to delete someone else's VM.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if rule, ok := strings.CutPrefix(id, idFirewalls+"/"); ok {
		return p.deleteRule(ctx, id, rule)
	}
	zone, name, err := p.parseID(id)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	return p.classify(opDelete, id, p.delete(ctx, zone, name))
}

// pendingPoll is how often Delete looks for an instance whose insert is pending.
const pendingPoll = 200 * time.Millisecond

func (p *Provider) delete(ctx context.Context, zone, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := p.lockName(ctx, zone, name)
	if err != nil {
		return err
	}
	defer unlock()
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return err
	}
	defer release()
	inst, err := p.awaitVisible(ctx, c, zone, name)
	if err != nil || inst == nil {
		return err
	}
	m := marksOf(inst.GetLabels())
	if !m.Managed {
		return fmt.Errorf("%w: instance %s in zone %s carries no egressd mark; egressd does not delete it", errNotOurs, name, zone)
	}
	cctx, cancel := p.call(ctx)
	op, err := c.inst.Delete(cctx, &computepb.DeleteInstanceRequest{Project: p.cfg.Project, Zone: zone, Instance: name})
	cancel()
	if isCode(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p.log.Info("gcp instance deleting", "zone", zone, "name", name, "operation", op.Name())
	done, err := p.awaitDone(ctx, c, zone, op.Name())
	if err != nil || !done {
		// Not gone yet: Get says so, and the reconciler deletes again (and collects the rule
		// then, from the instance it still reads).
		return err
	}
	if rule := inst.GetLabels()[labelFirewall]; rule != "" && p.cfg.manageFirewall {
		return p.collectFirewall(ctx, c, rule, m.Installation)
	}
	return nil
}

// awaitVisible reads the instance; when it is absent while its insert is pending, it waits
// (up to the delete budget) for it to appear. nil, nil: there is nothing to delete.
func (p *Provider) awaitVisible(ctx context.Context, c *clients, zone, name string) (*computepb.Instance, error) {
	deadline := time.Now().Add(p.cfg.delete)
	for {
		inst, err := p.read(ctx, c, zone, name)
		if err == nil {
			return inst, nil
		}
		if !isCode(err, http.StatusNotFound) {
			return nil, err
		}
		ops, err := p.insertOps(ctx, c, zone, name)
		switch {
		case err != nil:
			return nil, err
		case len(ops) == 0:
			return nil, nil
		case ops[len(ops)-1].GetStatus() == computepb.Operation_DONE:
			return nil, p.forgetFailedInserts(ctx, c, zone, ops)
		case !time.Now().Before(deadline):
			return nil, fmt.Errorf("%w: %s in zone %s is still being inserted", errInserting, name, zone)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pendingPoll):
		}
	}
}

// forgetFailedInserts deletes the failed insert operations of an instance that is not there
// (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/delete): Get reports
// such a failure until then, and after a Delete it must report NotFound.
func (p *Provider) forgetFailedInserts(ctx context.Context, c *clients, zone string, ops []*computepb.Operation) error {
	for _, op := range ops {
		if op.GetStatus() != computepb.Operation_DONE || opErrorOf(op) == nil {
			continue
		}
		cctx, cancel := p.call(ctx)
		_, err := c.zops.Delete(cctx, &computepb.DeleteZoneOperationRequest{Project: p.cfg.Project, Zone: zone, Operation: op.GetName()})
		cancel()
		if err != nil && !isCode(err, http.StatusNotFound) {
			return fmt.Errorf("forget failed insert %s: %w", op.GetName(), err)
		}
	}
	return nil
}

// awaitDone waits for a zone operation with zoneOperations.wait (the service holds each call
// until DONE or about 2 minutes), up to the delete budget. false: not done in time.
func (p *Provider) awaitDone(ctx context.Context, c *clients, zone, op string) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.delete)
	defer cancel()
	for {
		got, err := c.zops.Wait(wctx, &computepb.WaitZoneOperationRequest{Project: p.cfg.Project, Zone: zone, Operation: op})
		switch {
		case wctx.Err() != nil && ctx.Err() == nil:
			return false, nil // the budget, not the caller, ended the wait
		case err != nil:
			return false, err
		case got.GetStatus() == computepb.Operation_DONE:
			return true, operationError(got)
		}
	}
}
