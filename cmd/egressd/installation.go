package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureInstallation returns this installation's ID, creating it at the very first start.
func ensureInstallation(ctx context.Context, s *kvstore.Store) (string, error) {
	raw, err := ensureOnce(ctx, s, events.KeyInstallation, "installation id", func() []byte {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return []byte(hex.EncodeToString(b))
	})
	return string(raw), err
}

// ensureLeaseMaster returns the masters lease tokens are signed with and checked against,
// creating the first at the first start. `egressd lease-master rotate` replaces it without
// an outage (decision 88).
func ensureLeaseMaster(ctx context.Context, s *kvstore.Store) (leaseauth.Ring, error) {
	raw, err := ensureOnce(ctx, s, events.KeyLeaseMaster, "lease master", func() []byte { return leaseauth.NewMaster().Encode() })
	if err != nil {
		return leaseauth.Ring{}, err
	}
	return leaseauth.ParseRing(raw)
}

// ensureOnce returns the value of an egress_locks key that is written once, creating it with
// fresh() if it is missing. Create is first-writer-wins, so processes starting together agree
// on one value. what names it in errors; the value itself never appears in one.
func ensureOnce(ctx context.Context, s *kvstore.Store, key, what string, fresh func() []byte) ([]byte, error) {
	for range 3 {
		raw, _, err := kvstore.Get(ctx, s.Locks, key)
		if err == nil {
			return raw, nil
		}
		if !errors.Is(err, kvstore.ErrNotFound) {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		if _, err := s.Locks.Create(ctx, key, fresh()); err == nil {
			continue // read it back, as every other process does
		}
	}
	return nil, fmt.Errorf("could not create or read the %s", what)
}

// errNoLeaseMaster: setup has not created the lease master yet (an installation set up by an
// egressd before auth.mode "lease").
var errNoLeaseMaster = errors.New("no lease master in NATS: run `egressd setup` (as the admin user)")

// readLeaseMaster reads the lease masters without creating them, like readInstallation.
func readLeaseMaster(ctx context.Context, s *kvstore.Store) (leaseauth.Ring, error) {
	r, _, err := readLeaseRing(ctx, s.Locks)
	return r, err
}

// readLeaseRing reads the lease masters and the revision a rotation step compares against.
func readLeaseRing(ctx context.Context, locks jetstream.KeyValue) (leaseauth.Ring, uint64, error) {
	raw, rev, err := kvstore.Get(ctx, locks, events.KeyLeaseMaster)
	if errors.Is(err, kvstore.ErrNotFound) {
		return leaseauth.Ring{}, 0, errNoLeaseMaster
	}
	if err != nil {
		return leaseauth.Ring{}, 0, fmt.Errorf("read lease master: %w", err)
	}
	r, err := leaseauth.ParseRing(raw)
	return r, rev, err
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
