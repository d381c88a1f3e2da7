package forwardproxy

import (
	"errors"
	"log/slog"
	"maps"
	"os"
	"sync"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/internal/atomicfile"
)

// revocationFile is a lease revocation list on disk (leaseauth.ParseRevocations), kept fresh
// by whoever follows the installation's revocations: the local provider for its proxies,
// `egressd lease-revocations` beside a stock Squid. It is re-read when it changes.
//
// The proxy never depends on it being fresh: a missing file revokes nothing (the list has not
// been written yet), and a file that cannot be read or parsed leaves the last list read in
// force. So a proxy cut off from egressd neither lets revoked tokens in again nor refuses
// valid ones: it goes on with what it knew, and unrevoked tokens keep working until their
// expiry.
type revocationFile struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	loaded bool
	seen   fileKey
	list   *leaseauth.Revocations
}

func (f *revocationFile) current() *leaseauth.Revocations {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, err := statFile(f.path)
	if f.loaded && key == f.seen {
		return f.list
	}
	f.loaded, f.seen = true, key
	if errors.Is(err, os.ErrNotExist) {
		if f.list == nil {
			return nil
		}
		f.log.Warn("revocation list gone; keeping the last one read", "path", f.path)
		return f.list
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(f.path)
	}
	var list *leaseauth.Revocations
	if err == nil {
		list, err = leaseauth.ParseRevocations(data)
	}
	if err != nil {
		f.log.Warn("revocation list unusable; keeping the last one read", "path", f.path, "err", err)
		return f.list
	}
	f.list = list
	f.log.Debug("revocation list loaded", "path", f.path, "entries", list.Len())
	return list
}

// WriteRevocationsFile writes a revocation list to path, atomically (mode 0644: it holds no
// secret), so that a proxy reading it never sees half a list.
func WriteRevocationsFile(path string, list *leaseauth.Revocations) error {
	return atomicfile.Write(path, list.Encode(), 0o644)
}

// refusals counts refused credentials by reason.
type refusals struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *refusals) add(err error) {
	if err == nil {
		return
	}
	reason := leaseauth.Reason(err)
	if reason == "other" {
		reason = "credentials"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int64{}
	}
	r.n[reason]++
}

func (r *refusals) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}
