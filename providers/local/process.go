package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A proxy process is recognised by its command line: it carries --pid-file with the instance's
// pid-file path, which names the state dir and the instance. A pid alone could have been reused
// by an unrelated process since the proxy died.

// alive reports whether pid is a live, non-zombie process whose command line holds marker.
func alive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	if state := stat[i+2]; state == 'Z' || state == 'X' || state == 'x' {
		return false
	}
	return hasArg(proc, marker)
}

func hasArg(proc, marker string) bool {
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return false
	}
	for arg := range strings.SplitSeq(string(cmdline), "\x00") {
		if arg == marker {
			return true
		}
	}
	return false
}

// readPID reads a pid file. A missing file is (0, nil).
func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, errors.Join(errCorrupt, errors.New("pid file does not hold a pid"))
	}
	return pid, nil
}

// findProcesses returns every live process whose command line holds marker: the proxy, and
// an intermediate or a proxy that never got to write its pid file.
func findProcesses(marker string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if alive(pid, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stop sends SIGTERM to pids, waits up to grace (or until ctx is done) for them to end, then
// SIGKILLs what is left.
func stop(ctx context.Context, pids []int, marker string, grace time.Duration) error {
	if len(pids) == 0 {
		return nil
	}
	signalAll(pids, marker, syscall.SIGTERM)
	if waitGone(ctx, pids, marker, grace) {
		return nil
	}
	signalAll(pids, marker, syscall.SIGKILL)
	// Not bounded by ctx: a SIGKILLed process is gone in moments, and leaving it to be
	// counted as alive would only make the caller retry.
	if waitGone(context.Background(), pids, marker, 2*time.Second) {
		return nil
	}
	return errStillRunning
}

func signalAll(pids []int, marker string, sig syscall.Signal) {
	for _, pid := range pids {
		if alive(pid, marker) {
			syscall.Kill(pid, sig)
		}
	}
}

func waitGone(ctx context.Context, pids []int, marker string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		left := false
		for _, pid := range pids {
			left = left || alive(pid, marker)
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
}
