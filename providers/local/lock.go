package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Create and Delete of one name are serialized twice: by a mutex within this process (so
// goroutines queue cheaply and in order) and by a flock on <name>.lock across processes,
// which is what keeps two provisioners, or a provisioner and the intermediate of a dead one's
// Create, apart.

const lockPoll = 20 * time.Millisecond

// fileLock is a held flock. The lock belongs to the open file description, so a child given
// the file (exec ExtraFiles) holds it too until it exits.
type fileLock struct {
	f    *os.File
	path string
}

// lockFile takes an exclusive flock on path, creating the file, polling until ctx is done.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flockWait(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		// The holder before us may have removed the file (Delete does); a lock on an unlinked
		// file guards nothing, so start over on the new one.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			continue
		}
		return &fileLock{f: f, path: path}, nil
	}
}

func flockWait(ctx context.Context, f *os.File) error {
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		default:
			return fmt.Errorf("flock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", errBusy, f.Name(), ctx.Err())
		case <-t.C:
		}
	}
}

func samePath(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}

// remove deletes the lock file while the lock is held, for names that no longer exist.
func (l *fileLock) remove() { os.Remove(l.path) }

// release closes the file. It never uses LOCK_UN, which would also drop the lock for an
// intermediate process that still holds the same file description.
func (l *fileLock) release() { l.f.Close() }

// held is the pair of locks Create and Delete take on a name.
type held struct {
	file   *fileLock
	unlock func()
}

func (p *Provider) lock(ctx context.Context, name string) (*held, error) {
	ctx, cancel := context.WithTimeout(ctx, p.lockTimeout)
	defer cancel()
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBusy, name, err)
	}
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		unlock()
		return nil, err
	}
	f, err := lockFile(ctx, p.lockPath(name))
	if err != nil {
		unlock()
		return nil, err
	}
	return &held{file: f, unlock: unlock}, nil
}

func (h *held) release() {
	h.file.release()
	h.unlock()
}
