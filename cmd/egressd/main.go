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
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// stdio is a command's standard streams.
type stdio struct {
	in          io.Reader
	out, errOut io.Writer
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
