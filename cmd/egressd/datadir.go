package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFileName is the file in the data directory whose flock marks it as in use. Its text
// says who holds it, for the error a second start prints.
const lockFileName = "egressd.lock"

// dataDirLock is an all-in-one's hold on its data directory. The embedded nats-server's
// store may have one writer only: a second server opening it, even one that then fails to
// bind its port, rewrites stream state under the first and corrupts it. The lock is taken
// before anything in the directory is opened and lasts as long as the process (the kernel
// drops a flock with its holder, kill -9 included, so a stale lock file never blocks a
// start).
type dataDirLock struct{ f *os.File }

// lockDataDir creates dir if needed and takes its lock, or says who holds it. A second
// process that finds the lock held reads the lock file and changes nothing under dir.
func lockDataDir(dir, natsListen string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	path := filepath.Join(dir, lockFileName)
	// O_CREATE leaves an existing file as it is: a held lock file is only read.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", abs, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readLockHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("--data-dir %s is in use by another egressd (%s): stop it first, "+
				"or give this one a --data-dir of its own (with its own --nats-listen, --metrics-listen and --ui-listen), "+
				"or join the running one with --nats-url", abs, holder)
		}
		return nil, fmt.Errorf("--data-dir %s: lock %s: %w", abs, path, err)
	}
	l := &dataDirLock{f: f}
	if err := l.writeHolder(natsListen); err != nil {
		l.Close()
		return nil, fmt.Errorf("--data-dir %s: %w", abs, err)
	}
	return l, nil
}

// writeHolder records this process in the lock file, for the message of the next start.
func (l *dataDirLock) writeHolder(natsListen string) error {
	host, _ := os.Hostname()
	text := fmt.Sprintf("pid %d on %s, NATS on %s, since %s\n", os.Getpid(), host, natsListen,
		time.Now().UTC().Format(time.RFC3339))
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	if _, err := l.f.WriteAt([]byte(text), 0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	return nil
}

// Close releases the lock. The file stays: removing it would let a third process lock a
// new file of the same name while a second still holds the old one.
func (l *dataDirLock) Close() error { return l.f.Close() }

// readLockHolder is the holder's own description from the lock file, or a plain one.
func readLockHolder(f *os.File) string {
	b, err := io.ReadAll(io.LimitReader(f, 512))
	if s := strings.TrimSpace(string(b)); err == nil && s != "" && !strings.ContainsFunc(s, isControl) {
		return s
	}
	return "its process did not say which"
}

func isControl(r rune) bool { return r < ' ' && r != '\t' }
