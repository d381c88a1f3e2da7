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
	"syscall"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `egressd: forward proxies kept alive and handed out, on NATS JetStream.

Usage:
  egressd run [flags]            run every role with an embedded NATS server (or --nats-url)
  egressd setup [flags]          declare buckets, streams and consumers on a shared NATS (admin)
  egressd lease acquire|renew|release|report [flags]
                                 lease proxies from a shell script
  egressd status [-o json]       show proxies: phase, address, health, leases, reason, age
  egressd status pools           show pools: desired, ready, leased and draining members, next rotation
  egressd status providers       show provider targets: ready, reason, latency
  egressd status probers         show the live probers: their share of the fleet and lag
  egressd status holders         show who holds leases: leases, proxies, targets, sessions
  egressd status leases [--holder h]
                                 show every held lease: holder, proxy, target, session, expiry
  egressd stats [--since 1h] [--by target|proxy|provider|pool] [--json]
                                 block rates from the leasers' statistics over a window
  egressd events [-f] [--since 1h] [--kind k] [--proxy p]
                                 follow what happens, in a human-readable form
  egressd forward-proxy [flags]  the forward proxy the local provider runs
  egressd squid-auth --key-file F
                                 a Squid basic-auth helper that checks lease tokens
  egressd lease-key --proxy P [--out F]
                                 write a proxy's lease key, for squid-auth (admin)
  egressd version

Run "egressd <command> -h" for a command's flags.
`

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runCmd(ctx, rest, stderr)
	case "setup":
		return setupCmd(ctx, rest, stdout, stderr)
	case "lease":
		return leaseCmd(ctx, rest, stdout, stderr)
	case "status":
		return statusCmd(ctx, rest, stdout, stderr)
	case "events":
		return eventsCmd(ctx, rest, stdout, stderr)
	case "stats":
		return statsCmd(ctx, rest, stdout, stderr)
	case "forward-proxy":
		return forwardproxy.Main(ctx, rest, stderr)
	case "squid-auth":
		return squidAuthCmd(rest, os.Stdin, stdout, stderr)
	case "lease-key":
		return leaseKeyCmd(ctx, rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "egressd", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "egressd: unknown command %q\n\n%s", cmd, usage)
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
