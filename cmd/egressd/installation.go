package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// ensureInstallation returns this installation's ID, creating it at the very first start.
// Create is first-writer-wins, so processes starting together agree on one ID.
func ensureInstallation(ctx context.Context, s *kvstore.Store) (string, error) {
	for range 3 {
		raw, _, err := kvstore.Get(ctx, s.Locks, events.KeyInstallation)
		if err == nil {
			return string(raw), nil
		}
		if !errors.Is(err, kvstore.ErrNotFound) {
			return "", fmt.Errorf("read installation id: %w", err)
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		if _, err := s.Locks.Create(ctx, events.KeyInstallation, []byte(hex.EncodeToString(b))); err == nil {
			continue // read it back, as every other process does
		}
	}
	return "", errors.New("could not create or read the installation id")
}

// readInstallation reads the installation ID without creating it: roles on a shared NATS may
// not write it, and a missing one means `egressd setup` has not run.
func readInstallation(ctx context.Context, s *kvstore.Store) (string, error) {
	raw, _, err := kvstore.Get(ctx, s.Locks, events.KeyInstallation)
	if errors.Is(err, kvstore.ErrNotFound) {
		return "", errors.New("no installation id in NATS: run `egressd setup` (as the admin user) first")
	}
	if err != nil {
		return "", fmt.Errorf("read installation id: %w", err)
	}
	return string(raw), nil
}
