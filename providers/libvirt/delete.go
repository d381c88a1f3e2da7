package libvirt

import (
	"context"
	"fmt"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// Delete destroys and undefines the domain (with its NVRAM, managed save, snapshot and
// checkpoint metadata) and deletes its overlay and seed volumes, each step tolerating what is
// already gone, so a Delete cut off anywhere is finished by the next. The base image stays.
// A domain of that name without egressd's mark is refused, not deleted: an ID is only a
// string, and it must not be enough to destroy someone else's VM.
func (p *Provider) Delete(ctx context.Context, id string) error {
	h, name, err := p.parseID(id)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	return p.classify(opDelete, id, p.delete(ctx, h, name))
}

func (p *Provider) delete(ctx context.Context, h *hostConns, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := p.lockName(ctx, h.cfg.Name, name)
	if err != nil {
		return err
	}
	defer unlock()
	c, err := h.get(ctx)
	if err != nil {
		return err
	}
	removed, err := p.removeDomain(ctx, c, h.cfg, name)
	if err != nil {
		return err
	}
	if err := removeVolumes(ctx, c, h.cfg, name); err != nil {
		return err
	}
	if removed {
		p.log.Info("libvirt domain deleted", "host", h.cfg.Name, "name", name)
	}
	return nil
}

func (p *Provider) removeDomain(ctx context.Context, c conn, h HostConfig, name string) (bool, error) {
	dom, err := c.LookupDomain(ctx, name)
	if isCode(err, golibvirt.ErrNoDomain) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m, found, err := readMarks(ctx, c, dom)
	if err != nil {
		return false, err
	}
	if !found || !m.Managed {
		return false, fmt.Errorf("%w: domain %s on host %s carries no egressd mark; egressd does not delete it", errNotOurs, name, h.Name)
	}
	// Not running (55) and already gone (42) both mean there is nothing to stop.
	if err := c.DestroyDomain(ctx, dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) && !isCode(err, golibvirt.ErrNoDomain) {
		return false, err
	}
	if err := c.UndefineDomain(ctx, dom); err != nil && !isCode(err, golibvirt.ErrNoDomain) {
		return false, err
	}
	return true, nil
}

// removeVolumes deletes an instance's overlay and seed. A pool that is gone holds neither.
func removeVolumes(ctx context.Context, c conn, h HostConfig, name string) error {
	pool, err := c.LookupPool(ctx, h.Pool)
	if isCode(err, golibvirt.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, v := range []string{overlayVolume(name), seedVolume(name)} {
		if err := discard(ctx, c, pool, v); err != nil {
			return err
		}
	}
	return nil
}
