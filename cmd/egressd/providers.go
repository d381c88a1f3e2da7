package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/libvirt"
	"github.com/egressd/egressd/providers/local"
	"github.com/egressd/egressd/workers/provisioner"
)

// backend is a built provider with what the provisioner needs from it.
type backend interface {
	providers.Provider
	providers.Cataloger
}

// buildProvider is the one place that knows the concrete provider packages. hooks give
// providers the NATS-backed services they cannot reach themselves (providers never import
// NATS); nil hooks mean this process only.
func buildProvider(pc providerConfig, dataDir string, log *slog.Logger, hooks *providerHooks) (backend, error) {
	switch pc.Type {
	case "libvirt":
		var h libvirt.Hooks
		if hooks != nil {
			h = libvirt.Hooks{Lock: hooks.lock, Progress: func(ev libvirt.ProgressEvent) { hooks.progress(progressOf(ev)) }}
		}
		return libvirt.New(pc.Name, *pc.Libvirt, log, h)
	case "local":
		lc := pc.Local
		if lc == nil {
			lc = &localConfig{}
		}
		stateDir := lc.StateDir
		if stateDir == "" {
			stateDir = filepath.Join(dataDir, "local", pc.Name)
		}
		abs, err := filepath.Abs(stateDir)
		if err != nil {
			return nil, err
		}
		return local.New(pc.Name, local.Config{
			StateDir:         abs,
			Addresses:        lc.Addresses,
			BindSource:       lc.BindSource,
			MaxConcurrentOps: lc.MaxConcurrentOps,
		}, log)
	}
	return nil, fmt.Errorf("provider %s: unknown type %q", pc.Name, pc.Type)
}

func progressOf(ev libvirt.ProgressEvent) progress {
	return progress{Provider: ev.Provider, Host: ev.Host, Image: ev.Image, Phase: ev.Phase, Done: ev.Done, Total: ev.Total}
}

// libvirtLeftovers adapts the libvirt provider's volumes-without-a-domain to orphan GC.
type libvirtLeftovers struct{ p *libvirt.Provider }

func (l libvirtLeftovers) Leftovers(ctx context.Context) ([]provisioner.Leftover, error) {
	list, err := l.p.Leftovers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provisioner.Leftover, 0, len(list))
	for _, lo := range list {
		out = append(out, provisioner.Leftover{ID: lo.ID, Host: lo.Host, Name: lo.Name, Kind: "volumes", ModifiedAt: lo.ModifiedAt})
	}
	return out, nil
}

// localLeftovers adapts the local provider's unreadable instance directories to orphan GC.
type localLeftovers struct{ p *local.Provider }

func (l localLeftovers) Leftovers(ctx context.Context) ([]provisioner.Leftover, error) {
	list, err := l.p.Leftovers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provisioner.Leftover, 0, len(list))
	for _, lo := range list {
		out = append(out, provisioner.Leftover{ID: lo.ID, Host: "local", Name: lo.Name, Kind: "state-dir", ModifiedAt: lo.ModifiedAt})
	}
	return out, nil
}

// leftoversOf returns the backend's leftover lister, if it has one.
func leftoversOf(b backend) provisioner.LeftoverLister {
	switch p := b.(type) {
	case *libvirt.Provider:
		return libvirtLeftovers{p}
	case *local.Provider:
		return localLeftovers{p}
	}
	return nil
}
