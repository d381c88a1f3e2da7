package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// pruneCatalog removes from provider_catalog every provider the config no longer declares, and
// returns their names. Only a declaration of the whole installation may prune: `egressd setup`
// and the all-in-one with its embedded server, whose config lists every provider there is. A
// provisioner knows only the providers it serves, and the one that published a removed
// provider's record is not running any more to take it back.
//
// Each record is deleted at the revision read, so one that a provisioner of that provider
// republished meanwhile (it is still running somewhere with an older config) stays, and the
// next setup decides again. The reconciler then turns the specs that name a removed provider
// Invalid and leaves their instances alone.
func pruneCatalog(ctx context.Context, kv jetstream.KeyValue, cfg config.File) ([]string, error) {
	declared := make([]string, 0, len(cfg.Providers))
	for _, pc := range cfg.Providers {
		declared = append(declared, pc.Name)
	}
	records, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, err
	}
	var removed []string
	for name, e := range records {
		if slices.Contains(declared, name) {
			continue
		}
		err := kvstore.DeleteAt(ctx, kv, name, e.Revision())
		switch {
		case err == nil, errors.Is(err, kvstore.ErrNotFound):
			removed = append(removed, name)
		case errors.Is(err, kvstore.ErrConflict):
			// Republished since the read: a provisioner still serves it.
		default:
			return removed, fmt.Errorf("remove provider %s from %s: %w", name, events.BucketCatalog, err)
		}
	}
	slices.Sort(removed)
	return removed, nil
}

// pruneCatalogLogged is pruneCatalog for the all-in-one, whose embedded server holds the
// whole installation and whose config is all of it.
func pruneCatalogLogged(ctx context.Context, s *kvstore.Store, cfg config.File, log *slog.Logger) error {
	removed, err := pruneCatalog(ctx, s.Catalog, cfg)
	for _, name := range removed {
		log.Warn("provider removed from the catalog: no longer configured; its instances are left alone", "provider", name)
	}
	return err
}
