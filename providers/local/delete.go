package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
)

// Delete stops the instance's processes (SIGTERM, then SIGKILL after the grace period) and
// removes its directory. Deleting a missing instance succeeds.
func (p *Provider) Delete(ctx context.Context, id string) error {
	return p.classify("delete", id, p.delete(ctx, id))
}

func (p *Provider) delete(ctx context.Context, id string) error {
	name, err := parseID(id)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l, err := p.lock(ctx, name)
	if err != nil {
		return err
	}
	defer l.release()
	if err := p.remove(ctx, name, l); err != nil {
		return err
	}
	p.log.Info("instance deleted", "instance", name)
	return nil
}

// remove stops every process carrying the instance's mark and removes its directory and lock
// file. The directory goes by rename first, so that readers never see half of it.
func (p *Provider) remove(ctx context.Context, name string, l *held) error {
	marker := p.pidPath(name)
	if err := stop(ctx, findProcesses(marker), marker, p.stopGrace); err != nil {
		return err
	}
	// The name's lock keeps the directory from coming or going under us.
	if _, err := os.Lstat(p.dir(name)); errors.Is(err, os.ErrNotExist) {
		l.file.remove()
		return nil
	}
	trash, err := os.MkdirTemp(p.stateDir, trashPrefix+name+"-")
	if err != nil {
		return err
	}
	if err := os.Rename(p.dir(name), filepath.Join(trash, name)); err != nil {
		os.Remove(trash)
		return err
	}
	if err := os.RemoveAll(trash); err != nil {
		// The instance is gone from its name; the next allocation sweeps the rest.
		p.log.Warn("removing a deleted instance's files", "instance", name, "err", err)
	}
	l.file.remove()
	return nil
}
