package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// revocationsFile is the installation's lease revocation list in the state dir: one file for
// every proxy of the provider, each started with --revocations-file naming it. A lease ID
// names its proxy, and the list holds no secret, so sharing it costs each proxy only the
// other proxies' entries.
const revocationsFile = "revocations"

func (p *Provider) revocationsPath() string { return filepath.Join(p.stateDir, revocationsFile) }

// WriteRevocations delivers the lease revocation list to every proxy of the provider: it
// replaces the file, atomically, and each running proxy reads it at its next request (and
// its tunnels within a second). Proxies keep the last list they read while it is not
// rewritten, so a provisioner that stops leaves them with what it last delivered.
func (p *Provider) WriteRevocations(ctx context.Context, list *leaseauth.Revocations) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if err := forwardproxy.WriteRevocationsFile(p.revocationsPath(), list); err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	return nil
}

// refusalsFile is where each lease-mode proxy keeps its counts of refused credentials.
const refusalsFile = "refusals.json"

// LeaseRefusals sums the refusal counts of the provider's proxies, by reason (revoked,
// expired, instance, key, signature, malformed, credentials): what its proxies refused since
// each started. A proxy that restarts or goes takes its counts with it, which a counter's
// rate reads as a reset. Unreadable files are skipped: a count is never worth an error.
func (p *Provider) LeaseRefusals() (map[string]int64, error) {
	names, err := p.instanceNames()
	if err != nil {
		return nil, err
	}
	sum := map[string]int64{}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(p.dir(name), refusalsFile))
		if err != nil {
			continue
		}
		r, err := forwardproxy.ReadRefusals(data)
		if err != nil {
			continue
		}
		for reason, n := range r.Refused {
			sum[reason] += n
		}
	}
	return sum, nil
}
