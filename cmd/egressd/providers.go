package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/libvirt"
	"github.com/egressd/egressd/providers/local"
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

// leftoversOf returns the backend's leftover lister, if it has one.
func leftoversOf(b backend) providers.LeftoverLister {
	l, _ := b.(providers.LeftoverLister)
	return l
}
