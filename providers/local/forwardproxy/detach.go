package forwardproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// detach is the short-lived intermediate of a double fork. It starts the proxy in a session
// of its own (so no signal for its starter's process group or terminal reaches it), waits
// until the proxy listens, and exits; the proxy is then reparented away from whoever started
// the intermediate, which therefore leaves neither a zombie nor a goroutine behind.
//
// The intermediate may inherit a lock (--lock-fd) from its starter. It keeps the lock until it
// exits, so that the starter dying mid-start does not let another start race this one, and
// keeps it from the proxy, which would otherwise hold it for its whole life.
func detach(ctx context.Context, o *options, args []string, stderr io.Writer) int {
	// The starter may die and take the read ends of our stdout and stderr with it; a write to
	// them must then fail rather than kill this process before the proxy is ready.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	if o.lockFD >= 0 {
		if _, err := fcntlGetFD(o.lockFD); err != nil {
			fmt.Fprintf(stderr, "forward-proxy: --lock-fd %d: %v\n", o.lockFD, err)
			return ExitUsage
		}
	}
	// The proxy lives for long: it gets stdin, the log file and the ready pipe, and no other
	// descriptor this process inherited (the lock above, or whatever its starter leaked).
	closeOnExecFrom(3)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "forward-proxy: cannot find my own executable:", err)
		return ExitFailure
	}
	prefix, ok := argsPrefix(os.Args[1:], args)
	if !ok {
		fmt.Fprintln(stderr, "forward-proxy: --detach needs its arguments to be the tail of the program's arguments")
		return ExitUsage
	}
	childArgs, err := o.proxyArgs()
	if err != nil {
		fmt.Fprintln(stderr, "forward-proxy:", err)
		return ExitUsage
	}

	var logf *os.File
	if o.logFile != "" {
		if logf, err = openLog(o.logFile); err != nil {
			fmt.Fprintln(stderr, "forward-proxy: log file:", err)
			return exitCode(err)
		}
		defer logf.Close()
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(stderr, "forward-proxy:", err)
		return ExitFailure
	}
	defer r.Close()

	cmd := exec.Command(exe, append(slices.Clone(prefix), childArgs...)...)
	cmd.Dir = "/" // pin no directory of the starter's
	if logf != nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	cmd.ExtraFiles = []*os.File{w} // fd 3, see proxyArgs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintln(stderr, "forward-proxy: start:", err)
		return ExitFailure
	}

	return awaitReady(ctx, cmd, r, o.readyTimeout, stderr)
}

// awaitReady waits for the proxy's first line on the ready pipe r: "ready", or "error …"
// when it could not start. A proxy that says neither within timeout, or whose start is
// abandoned, is killed and reaped.
func awaitReady(ctx context.Context, cmd *exec.Cmd, r io.Reader, timeout time.Duration, stderr io.Writer) int {
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		if line == "ready" {
			fmt.Fprintln(stderr, "forward-proxy: ready, pid", cmd.Process.Pid)
			return ExitOK
		}
		err := cmd.Wait()
		msg := strings.TrimPrefix(line, "error ")
		if msg == "" {
			msg = fmt.Sprintf("exited before it was ready (%v)", err)
		}
		fmt.Fprintln(stderr, "forward-proxy:", msg)
		return childExitCode(err)
	case <-timer.C:
		fmt.Fprintf(stderr, "forward-proxy: not listening after %s\n", timeout)
	case <-ctx.Done():
		fmt.Fprintln(stderr, "forward-proxy: start abandoned")
	}
	cmd.Process.Kill()
	cmd.Wait()
	return ExitNotReady
}

// proxyArgs renders the options for the proxy the intermediate starts. Paths become absolute
// because the proxy runs in "/".
func (o *options) proxyArgs() ([]string, error) {
	args := []string{"--listen", o.listen, "--log-level", o.logLevel, "--ready-fd", "3"}
	add := func(flag, value string, path bool) error {
		if value == "" {
			return nil
		}
		if path {
			abs, err := filepath.Abs(value)
			if err != nil {
				return fmt.Errorf("%s: %w", flag, err)
			}
			value = abs
		}
		args = append(args, flag, value)
		return nil
	}
	return args, errors.Join(
		add("--source", o.source, false),
		add("--auth-file", o.authFile, true),
		add("--revocations-file", o.revFile, true),
		add("--refusals-file", o.refusedFile, true),
		add("--instance", o.instance, false),
		add("--pid-file", o.pidFile, true),
	)
}

// argsPrefix returns what precedes tail in all.
func argsPrefix(all, tail []string) ([]string, bool) {
	if len(tail) > len(all) || !slices.Equal(all[len(all)-len(tail):], tail) {
		return nil, false
	}
	return all[:len(all)-len(tail)], true
}

func childExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch c := ee.ExitCode(); c {
		case ExitUsage, ExitAddrInUse, ExitPermission, ExitAddrNotAvail:
			return c
		}
	}
	return ExitFailure
}

func fcntlGetFD(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// closeOnExecFrom marks every open descriptor from fd up as close-on-exec.
func closeOnExecFrom(fd int) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= fd {
			syscall.CloseOnExec(n)
		}
	}
}
