package proxmox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Delete removes the VM (stopped first, disks purged) and its seed ISO, and waits for both.
// A VM that is gone, or that another VM replaced at the VMID, is success; its seed is still
// removed: a Delete killed between the two finishes the job. A locked VM is Transient.
func (p *Provider) Delete(ctx context.Context, id string) error {
	vmid, name, err := parseID(id)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	unlock, err := p.lockName(ctx, name)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	defer unlock()
	return p.classify(opDelete, id, p.delete(ctx, vmid, name))
}

func (p *Provider) delete(ctx context.Context, vmid int, name string) error {
	log := p.log.With("vmid", vmid, "name", name)
	res, err := p.api.resources(ctx)
	if err != nil {
		return err
	}
	r, ok := findVMID(res, vmid)
	switch {
	case ok && r.Lock != "" && (r.Name == name || r.Name == ""):
		// Ours mid-task, or a clone still running without its name (F8): maybe ours.
		return fmt.Errorf("%w: VM %d (%s); deleting once the task ends", errLocked, vmid, r.Lock)
	case ok && r.Name != name:
		log.Info("proxmox delete: the VMID holds another VM; leaving it", "found", r.Name)
		fallthrough
	case !ok:
		// Where the seed went is unknown without the VM: every node's view of the ISO
		// storage (once for shared storage; a missing volume is deleted OK, F13).
		for _, n := range p.cfg.Nodes {
			if err := p.deleteSeed(ctx, n.Name, name, log); err != nil {
				return err
			}
		}
		return nil
	}
	if r.Status == "unknown" {
		return fmt.Errorf("VM %d: PVE reports status unknown (node %s unreachable or mid-task); deleting later", vmid, r.Node)
	}
	cfg, err := p.api.config(ctx, r.Node, vmid)
	if isGone(err) {
		return p.deleteSeed(ctx, r.Node, name, log)
	}
	if err != nil {
		return err
	}
	if m, found := parseMarks(cfg["description"]); !found || !m.Managed {
		log.Info("proxmox delete: the VM has our name but no egressd marks; leaving it")
		return nil
	}
	if r.Status != "stopped" {
		upid, err := p.api.power(ctx, r.Node, vmid, "stop")
		if err == nil {
			err = p.api.wait(ctx, upid, powerBudget)
		}
		if err != nil && !isGone(err) {
			return err
		}
	}
	if err := p.retryLocked(ctx, func() error {
		upid, err := p.api.destroy(ctx, r.Node, vmid)
		if err == nil {
			err = p.api.wait(ctx, upid, destroyBudget)
		}
		if isGone(err) || isGoneTask(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	log.Debug("proxmox VM destroyed", "node", r.Node)
	return p.deleteSeed(ctx, r.Node, name, log)
}

// deleteSeed removes the seed ISO; PVE runs it as an imgdel task (F13).
func (p *Provider) deleteSeed(ctx context.Context, node, name string, log *slog.Logger) error {
	upid, err := p.api.deleteVolume(ctx, node, p.cfg.ISOStorage, p.seedVolume(name))
	if err == nil {
		err = p.api.wait(ctx, upid, uploadBudget)
	}
	if err != nil {
		return fmt.Errorf("deleting seed %s on %s: %w", p.seedVolume(name), node, err)
	}
	log.Debug("proxmox seed deleted", "node", node)
	return nil
}

// isGoneTask reports a destroy task that found the VM already gone (F2's text in the task).
func isGoneTask(err error) bool {
	var te *taskError
	return errors.As(err, &te) && containsMissing(te.exit)
}
