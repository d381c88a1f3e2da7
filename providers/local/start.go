package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// start runs `<binary> forward-proxy --detach …` and waits for it. The intermediate inherits
// the name's lock as fd 3 and keeps it until it exits: if this process dies mid-start, the
// next Create or Delete of the name waits for the intermediate instead of racing it. The
// proxy the intermediate starts writes its own pid file once it listens.
func (p *Provider) start(ctx context.Context, m *meta, lock *fileLock) (providers.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, p.startTimeout)
	defer cancel()
	binary := p.cfg.Binary
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return providers.Instance{}, fmt.Errorf("%w: %w", errBinary, err)
		}
		binary = exe
	}
	addr, err := netip.ParseAddr(m.Address)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("%w: address %q", errCorrupt, m.Address)
	}
	dir := p.dir(m.Name)
	args := append(slices.Clone(p.cfg.binaryArgs()),
		"--detach",
		"--listen", netip.AddrPortFrom(addr, uint16(m.Port)).String(),
		"--instance", m.Name,
		"--pid-file", p.pidPath(m.Name),
		"--log-file", filepath.Join(dir, logFile),
		"--lock-fd", "3",
		"--ready-timeout", p.readyTimeout.String(),
	)
	if m.BindSource {
		args = append(args, "--source", m.Address)
	}
	if m.Auth {
		args = append(args, "--auth-file", filepath.Join(dir, authFile), "--revocations-file", p.revocationsPath(),
			"--refusals-file", filepath.Join(dir, refusalsFile))
	}

	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{lock.f}
	// Its own process group: a Ctrl-C meant for egressd must not cut a start in half.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &tail{max: 2048}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = p.startTimeout
	if err := cmd.Run(); err != nil {
		// The intermediate is gone; a proxy it left half-started must not outlive the error.
		marker := p.pidPath(m.Name)
		if serr := stop(context.Background(), findProcesses(marker), marker, p.stopGrace); serr != nil {
			p.log.Warn("stopping a proxy that failed to start", "instance", m.Name, "err", serr)
		}
		return providers.Instance{}, startError(ctx, err, out.String())
	}
	inst := p.describe(m)
	if inst.State != providers.StateRunning {
		return providers.Instance{}, fmt.Errorf("%w: the proxy exited right after it started; see %s",
			errStartTimeout, filepath.Join(dir, logFile))
	}
	return inst, nil
}

// startError turns the intermediate's exit into a cause classify knows.
func startError(ctx context.Context, err error, output string) error {
	msg := strings.TrimSpace(output)
	if msg == "" {
		msg = err.Error()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", errStartTimeout, ctx.Err())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist),
			errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
			return fmt.Errorf("%w: %w", errBinary, err)
		}
		return fmt.Errorf("starting the forward proxy: %w", err)
	}
	switch ee.ExitCode() {
	case forwardproxy.ExitAddrInUse:
		return fmt.Errorf("%w: %s", syscall.EADDRINUSE, msg)
	case forwardproxy.ExitPermission:
		return fmt.Errorf("%w: %s", syscall.EACCES, msg)
	case forwardproxy.ExitAddrNotAvail:
		return fmt.Errorf("%w: %s", syscall.EADDRNOTAVAIL, msg)
	case forwardproxy.ExitUsage:
		return fmt.Errorf("%w: it rejected its arguments: %s", errBinary, msg)
	case forwardproxy.ExitNotReady:
		return fmt.Errorf("%w: %s", errStartTimeout, msg)
	}
	return fmt.Errorf("forward proxy failed to start (%v): %s", err, msg)
}

// tail keeps the last max bytes written to it: enough of the intermediate's output to explain
// a failure.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
