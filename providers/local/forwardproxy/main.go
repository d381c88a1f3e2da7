package forwardproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/egressd/egressd/providers/local/internal/atomicfile"
)

// Exit codes of Main. They tell the local provider why an instance did not start, across the
// intermediate process of --detach.
const (
	ExitOK           = 0
	ExitFailure      = 1 // anything else; retrying may help
	ExitUsage        = 2 // bad flags
	ExitAddrInUse    = 3 // the listen address is taken
	ExitPermission   = 4 // not allowed to listen there (a privileged port), or to write the pid file
	ExitAddrNotAvail = 5 // the listen address is not on this machine
	ExitNotReady     = 6 // --detach: the proxy did not get ready in time
)

type options struct {
	listen       string
	source       string
	authFile     string
	revFile      string
	refusedFile  string
	instance     string
	pidFile      string
	logFile      string
	logLevel     string
	detach       bool
	readyFD      int
	lockFD       int
	readyTimeout time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("forward-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: egressd forward-proxy --listen addr:port [flags]")
		fmt.Fprintln(stderr, "An HTTP forward proxy (CONNECT and absolute-form http://) with optional basic auth.")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "", "`addr:port` to listen on (required)")
	fs.StringVar(&o.source, "source", "", "outbound source `ip` for upstream connections")
	fs.StringVar(&o.authFile, "auth-file", "", "basic-auth `file`: one line, username:sha256:salt:sum (a password) or proxy:lease:key (lease tokens, docs/leases.md); re-read when it changes")
	fs.StringVar(&o.revFile, "revocations-file", "", "lease revocation list `file` (docs/leases.md): the tokens of the leases it names are refused; re-read when it changes; missing means none")
	fs.StringVar(&o.refusedFile, "refusals-file", "", "keep the counts of refused credentials, by reason, in `file` (JSON)")
	fs.StringVar(&o.instance, "instance", "", "instance `name`, for logs and for finding the process")
	fs.StringVar(&o.pidFile, "pid-file", "", "write the proxy's pid to `file` once it listens")
	fs.StringVar(&o.logFile, "log-file", "", "append logs to `file` instead of stderr")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug (one line per request), info, warn or error")
	fs.BoolVar(&o.detach, "detach", false, "start the proxy in its own session, wait until it listens, and exit")
	fs.IntVar(&o.readyFD, "ready-fd", -1, "write \"ready\" or \"error <message>\" to file descriptor `n` once listening")
	fs.IntVar(&o.lockFD, "lock-fd", -1, "--detach: file descriptor `n` to hold until exit and not pass to the proxy")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 10*time.Second, "--detach: how long to wait for the proxy to listen")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var problems []error
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		problems = append(problems, fmt.Errorf("--listen: %q is not addr:port", o.listen))
	}
	if o.source != "" {
		if _, err := netip.ParseAddr(o.source); err != nil {
			problems = append(problems, fmt.Errorf("--source: %q is not an IP address", o.source))
		}
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		problems = append(problems, fmt.Errorf("--log-level: %w", err))
	}
	if o.readyTimeout <= 0 {
		problems = append(problems, errors.New("--ready-timeout: must be positive"))
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintln(stderr, "forward-proxy:", err)
		return nil, err
	}
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// Main runs the forward-proxy command, `egressd forward-proxy <flags>`, and returns its exit
// code (the Exit constants). args are the arguments after the subcommand. With --detach, Main
// re-executes the running program in a new session and returns once that proxy listens; for
// that, args must be the tail of os.Args (everything before them is repeated for the proxy).
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	if o.detach {
		return detach(ctx, o, args, stderr)
	}
	return run(ctx, o, stderr)
}

// run is the long-lived proxy.
func run(ctx context.Context, o *options, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()

	ready := newReadyFD(o.readyFD)
	defer ready.close()
	out := stderr
	if o.logFile != "" {
		f, err := openLog(o.logFile)
		if err != nil {
			return ready.fail(stderr, exitCode(err), fmt.Errorf("log file: %w", err))
		}
		defer f.Close()
		out = f
	}
	level, _ := parseLevel(o.logLevel)
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	if o.instance != "" {
		log = log.With("instance", o.instance)
	}
	if o.authFile != "" {
		// A proxy that starts without a usable credential would deny everything; better to
		// say so at once.
		if _, err := loadAuthFile(o.authFile); err != nil {
			return ready.fail(out, ExitFailure, fmt.Errorf("auth file: %w", err))
		}
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return ready.fail(out, exitCode(err), err)
	}
	if o.pidFile != "" {
		// The proxy writes its own pid file, after it listens: a pid file then always names a
		// process that got that far, even if whoever started it died meanwhile.
		if err := atomicfile.Write(o.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			ln.Close()
			return ready.fail(out, exitCode(err), fmt.Errorf("pid file: %w", err))
		}
	}
	ready.ok()
	log.Info("forward proxy listening", "listen", ln.Addr().String(), "source", o.source, "auth", o.authFile != "")
	err = Serve(ctx, ln, Config{Listen: o.listen, Source: o.source, AuthFile: o.authFile, RevocationsFile: o.revFile, RefusalsFile: o.refusedFile, Logger: log})
	if err != nil {
		log.Error("forward proxy failed", "err", err)
		return ExitFailure
	}
	log.Info("forward proxy stopped")
	return ExitOK
}

func openLog(path string) (*os.File, error) {
	return os.OpenFile(filepath.Clean(path), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

func exitCode(err error) int {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return ExitAddrInUse
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return ExitAddrNotAvail
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return ExitPermission
	default:
		return ExitFailure
	}
}

// readyFD is the write end of the pipe the --detach intermediate waits on.
type readyFD struct{ f *os.File }

func newReadyFD(fd int) *readyFD {
	if fd < 0 {
		return &readyFD{}
	}
	return &readyFD{f: os.NewFile(uintptr(fd), "ready")}
}

// ok and fail ignore write errors: the intermediate may be gone, which must not stop a proxy
// that is otherwise fine.
func (r *readyFD) ok() {
	if r.f != nil {
		io.WriteString(r.f, "ready\n")
		r.close()
	}
}

func (r *readyFD) fail(log io.Writer, code int, err error) int {
	fmt.Fprintln(log, "forward-proxy:", err)
	if r.f != nil {
		io.WriteString(r.f, "error "+oneLine(err.Error())+"\n")
		r.close()
	}
	return code
}

func (r *readyFD) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
