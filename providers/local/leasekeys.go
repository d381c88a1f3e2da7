package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// LeaseKeys are the lease keys each lease-mode instance's auth file holds now, by instance
// name: what its proxy checks tokens with at its next request. Instances with a password, or
// none, or a file that does not parse, are left out (a create writes them whole).
func (p *Provider) LeaseKeys(ctx context.Context) (map[string]leaseauth.KeySet, error) {
	names, err := p.instanceNames()
	if err != nil {
		return nil, err
	}
	out := map[string]leaseauth.KeySet{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(filepath.Join(p.dir(name), authFile))
		if err != nil || !leaseauth.AreFileLines(string(data)) {
			continue
		}
		if set, err := leaseauth.ParseKeyLines(string(data)); err == nil {
			out[name] = set
		}
	}
	return out, nil
}

// WriteLeaseKeys replaces the keys of the instance named name, atomically: its running proxy
// checks the next request with the new set (a master rotation, decision 88). An instance
// gone meanwhile is not brought back.
func (p *Provider) WriteLeaseKeys(ctx context.Context, name string, keys leaseauth.KeySet) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := os.Stat(p.dir(name)); err != nil {
		return fmt.Errorf("lease keys of %s: %w", name, errors.Join(err, errors.New("instance gone")))
	}
	if err := forwardproxy.WriteLeaseKeyFile(filepath.Join(p.dir(name), authFile), keys.FileLines()); err != nil {
		return fmt.Errorf("lease keys of %s: %w", name, err)
	}
	return nil
}
