// Command egressd is the control plane for fleets of forward proxies: every role in one
// binary, on NATS JetStream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// stdio is a command's standard streams.
type stdio struct {
	in          io.Reader
	out, errOut io.Writer
}

// command is one entry of the one table that both dispatch and the usage text read, so that
// neither can list a command the other does not.
type command struct {
	name string
	help []helpLine // one line or more in the usage text
	run  func(ctx context.Context, args []string, sio stdio) int
}

// helpLine is a usage line: what follows "egressd ", and what it does.
type helpLine struct{ synopsis, summary string }

// commands is every command, in the order the usage text lists them. It is filled in init:
// help reads the table it is part of.
var commands []command

func init() {
	commands = []command{
		{"run", []helpLine{{"run [flags]", "run every role with an embedded NATS server (or --nats-url)"}},
			func(ctx context.Context, a []string, s stdio) int { return runCmd(ctx, a, s.errOut) }},
		{"setup", []helpLine{{"setup [flags]", "declare buckets, streams and consumers on a shared NATS (admin)"}},
			func(ctx context.Context, a []string, s stdio) int { return setupCmd(ctx, a, s.out, s.errOut) }},
		{"validate", []helpLine{{"validate proxy|pool FILE [--config F]", "check a proxy or pool document (- for stdin); every error names its field"}},
			validateCmd},
		{"apply", []helpLine{{"apply proxy|pool NAME FILE", "check a document as validate does, then write it to proxies or pools"}},
			applyCmd},
		{"delete", []helpLine{{"delete proxy|pool NAME", "delete a proxy (its instance goes) or a pool (its members go)"}},
			deleteCmd},
		{"lease", []helpLine{{"lease acquire|renew|release|report [flags]", "lease proxies from a shell script"},
			{"lease token CRAWLER-NAME", "a bearer token for the lease HTTP face, and its config entry"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseCmd(ctx, a, s.out, s.errOut) }},
		{"status", []helpLine{{"status [-o json] [--check]", "show proxies: phase, address, health, leases, reason, age"},
			{"status pools", "show pools: desired, ready, leased and draining members, next rotation"},
			{"status providers", "show provider targets: ready, reason, latency"},
			{"status probers", "show the live probers: their share of the fleet and lag"},
			{"status holders", "show who holds leases: leases, proxies, targets, sessions"},
			{"status leases [--holder h]", "show every held lease: holder, proxy, target, session, expiry"}},
			func(ctx context.Context, a []string, s stdio) int { return statusCmd(ctx, a, s.out, s.errOut) }},
		{"stats", []helpLine{{"stats [--since 1h] [--by target|proxy|provider|pool] [--json]", "block rates from the leasers' statistics over a window"}},
			func(ctx context.Context, a []string, s stdio) int { return statsCmd(ctx, a, s.out, s.errOut) }},
		{"events", []helpLine{{"events [-f] [--since 1h] [--kind k] [--proxy p]", "follow what happens, in a human-readable form"}},
			func(ctx context.Context, a []string, s stdio) int { return eventsCmd(ctx, a, s.out, s.errOut) }},
		{"forward-proxy", []helpLine{{"forward-proxy [flags]", "the forward proxy the local provider runs"}},
			func(ctx context.Context, a []string, s stdio) int { return forwardproxy.Main(ctx, a, s.errOut) }},
		{"squid-auth", []helpLine{{"squid-auth --key-file F", "a Squid basic-auth helper that checks lease tokens"}},
			func(_ context.Context, a []string, s stdio) int { return squidAuthCmd(a, s.in, s.out, s.errOut) }},
		{"lease-key", []helpLine{{"lease-key --proxy P [--out F]", "write a proxy's lease key, for squid-auth (admin)"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseKeyCmd(ctx, a, s.out, s.errOut) }},
		{"version", []helpLine{{"version", "print the version"}},
			func(_ context.Context, _ []string, s stdio) int { fmt.Fprintln(s.out, "egressd", version); return 0 }},
		{"help", []helpLine{{"help", "this text"}},
			func(_ context.Context, _ []string, s stdio) int { fmt.Fprint(s.out, usage()); return 0 }},
	}
}

// firstSteps is what egressd with no arguments says first: a newcomer's way in.
const firstSteps = `New here? Start everything on this machine (NATS embedded, one local provider):

  egressd run

then, in another shell, declare a proxy and watch it come up (README.md has the tour):

  egressd apply proxy crawl-1 - <<< '{"provider":"local"}'
  egressd status
`

// aliases are other spellings of a command.
var aliases = map[string]string{"--version": "version", "-h": "help", "--help": "help"}

// usage is the top-level help, made from the command table.
func usage() string {
	var b strings.Builder
	b.WriteString("egressd: forward proxies kept alive and handed out, on NATS JetStream.\n\nUsage:\n")
	for _, c := range commands {
		writeHelp(&b, c.help)
	}
	b.WriteString("\nRun \"egressd <command> -h\" for a command's flags.\n")
	return b.String()
}

// commandUsage is one command's lines of the usage text, for its own -h (status lists its
// views from the same table).
func commandUsage(name string) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	for _, c := range commands {
		if c.name == name {
			writeHelp(&b, c.help)
		}
	}
	return b.String()
}

func writeHelp(b *strings.Builder, lines []helpLine) {
	const col = 22 // the synopsis column's width; a longer synopsis has its summary on the next line
	for _, h := range lines {
		if len(h.synopsis) < col {
			fmt.Fprintf(b, "  egressd %-*s %s\n", col, h.synopsis, h.summary)
		} else {
			fmt.Fprintf(b, "  egressd %s\n  %*s %s\n", h.synopsis, len("egressd ")+col, "", h.summary)
		}
	}
}

func main() {
	os.Exit(dispatch(os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, errOut: os.Stderr}))
}

func dispatch(args []string, sio stdio) int {
	if len(args) == 0 {
		fmt.Fprint(sio.errOut, firstSteps+"\n"+usage())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	name, rest := args[0], args[1:]
	if a, ok := aliases[name]; ok {
		name = a
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, rest, sio)
		}
	}
	fmt.Fprintf(sio.errOut, "egressd: unknown command %q\n\n%s", args[0], usage())
	return 2
}

// parseFlags parses a command's flags; a request for help is not an error.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
