package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local"
)

// backend is a built provider with what the provisioner needs from it.
type backend interface {
	providers.Provider
	providers.Cataloger
}

// buildProvider is the one place that knows the concrete provider packages.
func buildProvider(pc providerConfig, dataDir string, log *slog.Logger) (backend, error) {
	switch pc.Type {
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
