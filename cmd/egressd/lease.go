package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
)

const leaseUsage = `Usage:
  egressd lease acquire [--selector k=v,...] [--target T] [--ttl 5m] [--holder H] [--sticky S [--session 10m] [--sticky-mode soft|strict]] [--min-anonymity anonymous|elite] [--strategy balanced|round-robin|random|lowest-latency|best-for-target] [--tier k=v,... --tier k=v,...] [--wait 30s] [--pace 12s] [--url-only|--id-only]
  egressd lease renew   --id ID [--ttl 5m]
  egressd lease release --id ID
  egressd lease report  --id ID --result ok|blocked|failed [--target T] [--cooldown 10m] [--release]
  egressd lease token   CRAWLER-NAME   (a bearer token for the lease HTTP face, and its config entry)

Prints the service's JSON reply; on an error prints it on stderr and exits 1. A lease from
this command is not renewed: renew it, or let it expire. With --wait, an acquire that finds
nothing free waits (first come, first served) until a proxy frees a slot, up to that long (at
most the leaser's leases.maxWaitSeconds); --timeout then counts on top of it. For shell scripts:

  curl -x "$(egressd lease acquire --target example.com --url-only)" https://example.com/
  id=$(egressd lease acquire --target example.com --id-only)   # then renew, report, release --id "$id"
`

// leaseSubcommands are the lease subcommands that talk to the lease service, in the order the
// usage text lists them; leaseCmd refuses any other (token, which only writes a token, is
// dispatched before them).
var leaseSubcommands = []string{"acquire", "renew", "release", "report"}

// cliRetryBudget is how long egressd lease tries a request again while no lease service
// answers (and, for renew and release, after a timeout or an internal error).
const cliRetryBudget = 3 * time.Second

// leaseFlags are the flags of every lease subcommand; each registers the ones it takes.
type leaseFlags struct {
	natsURL  string
	timeout  time.Duration
	selector string
	target   string
	ttl      ttlFlag
	holder   string
	sticky   string
	minAnon  string
	strategy string
	session  ttlFlag
	wait     ttlFlag
	pace     ttlFlag
	tiers    tierFlags
	mode     string
	urlOnly  bool
	idOnly   bool
	id       string
	result   string
	cooldown ttlFlag
	release  bool
}

func leaseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, leaseUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, leaseUsage)
		return 0
	}
	sub := args[0]
	if sub == "token" {
		return leaseTokenCmd(args[1:], stdout, stderr)
	}
	if !slices.Contains(leaseSubcommands, sub) {
		fmt.Fprintf(stderr, "egressd lease: unknown subcommand %q\n\n%s", sub, leaseUsage)
		return 2
	}
	var f leaseFlags
	fs := leaseFlagSet(sub, &f, stderr)
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	// The ID may also be given as the only argument: egressd lease release <id>.
	if f.id == "" && fs.NArg() == 1 && sub != "acquire" {
		f.id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressd lease %s: unexpected arguments %q\n", sub, fs.Args())
		return 2
	}
	if f.urlOnly && f.idOnly {
		fmt.Fprintf(stderr, "egressd lease %s: --url-only and --id-only: choose one\n", sub)
		return 2
	}
	if sub != "acquire" && f.id == "" {
		fmt.Fprintf(stderr, "egressd lease %s: --id is required\n", sub)
		return 2
	}
	selector, err := parseSelector(f.selector)
	if err != nil {
		fmt.Fprintf(stderr, "egressd lease %s: --selector: %v\n", sub, err)
		return 2
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout+f.wait.d) // a wait is on top of the budget
	defer cancel()
	nc, err := dial(f.natsURL, "egressd lease", f.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "egressd lease %s: %v\n", sub, err)
		return 1
	}
	defer nc.Close()
	// A few seconds ride out a leaser's restart; a user with no lease service at all hears of it
	// without waiting out the whole --timeout.
	c := client.New(nc, client.WithRequestTimeout(f.timeout), client.WithRetryBudget(cliRetryBudget))

	reply, code, done := leaseCall(ctx, c, sub, &f, selector, stdout, stderr)
	if done {
		return code
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return fail(stderr, sub, err)
	}
	fmt.Fprintln(stdout, string(b))
	return 0
}

// leaseCall makes the request of lease sub and returns the service's reply to print, or
// (done) the exit code of a command that printed what it had to or failed.
func leaseCall(ctx context.Context, c *client.Client, sub string, f *leaseFlags, selector map[string]string, stdout, stderr io.Writer) (reply any, code int, done bool) {
	switch sub {
	case "acquire":
		g, err := c.AcquireOnce(ctx, client.AcquireOptions{Selector: selector, Target: f.target, TTL: f.ttl.d,
			Holder: f.holder, Sticky: f.sticky, MinAnonymity: events.Anonymity(f.minAnon),
			Strategy: events.Strategy(f.strategy), Session: f.session.d, StickyMode: events.StickyMode(f.mode), Wait: f.wait.d, Pace: f.pace.d, Tiers: f.tiers.sels})
		if err != nil {
			return nil, fail(stderr, sub, leaseErr(err)), true
		}
		switch {
		case f.urlOnly:
			fmt.Fprintln(stdout, g.URL)
			return nil, 0, true
		case f.idOnly:
			fmt.Fprintln(stdout, g.ID)
			return nil, 0, true
		}
		return wrapGrant(g), 0, false
	case "renew":
		g, err := c.Renew(ctx, f.id, f.ttl.d)
		if err != nil {
			return nil, fail(stderr, sub, leaseErr(err)), true
		}
		return wrapGrant(g), 0, false
	case "release":
		r, err := c.ReleaseReply(ctx, f.id)
		if err != nil {
			return nil, fail(stderr, sub, leaseErr(err)), true
		}
		return r, 0, false
	case "report":
		var opts []client.ReportOption
		if f.cooldown.d > 0 {
			opts = append(opts, client.WithCooldown(f.cooldown.d))
		}
		if f.release {
			opts = append(opts, client.AndRelease())
		}
		r, err := c.Report(ctx, f.id, client.Result(f.result), f.target, opts...)
		if err != nil {
			return nil, fail(stderr, sub, leaseErr(err)), true
		}
		return r, 0, false
	}
	return nil, fail(stderr, sub, fmt.Errorf("unknown subcommand %q", sub)), true
}

// leaseFlagSet registers the flags lease sub takes into f.
func leaseFlagSet(sub string, f *leaseFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lease "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.natsURL, "nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "budget for connecting and the request")
	switch sub {
	case "acquire":
		fs.StringVar(&f.selector, "selector", "", "attributes the proxy must have, k=v,k=v")
		fs.StringVar(&f.target, "target", "", "the site to crawl; proxies cooling down for it are skipped")
		fs.Var(&f.ttl, "ttl", "lease TTL: a duration (5m) or seconds (300); default the service's (5m)")
		fs.StringVar(&f.holder, "holder", "", "who holds the lease, for events")
		fs.StringVar(&f.sticky, "sticky", "", "prefer the proxy this key was last leased")
		fs.StringVar(&f.minAnon, "min-anonymity", "", "only proxies judged at least this anonymous: anonymous or elite")
		fs.StringVar(&f.strategy, "strategy", "", "order of the eligible proxies: balanced (default), round-robin, random, lowest-latency, best-for-target or packed")
		fs.Var(&f.tiers, "tier", "a tier, k=v,k=v added to --selector; repeat it, cheapest first: the target starts on the first and moves up after blocks (needs --target)")
		fs.Var(&f.session, "session", "bind --sticky to the granted proxy this long (a duration or seconds), even after release")
		fs.Var(&f.wait, "wait", "when nothing matching is free, wait up to this long (a duration or seconds) for a slot, first come first served")
		fs.Var(&f.pace, "pace", "at least this long (a duration or seconds) between two grants of one proxy for --target, whoever asks")
		fs.StringVar(&f.mode, "sticky-mode", "", "what a session does when its proxy is unavailable: soft (move, default) or strict (fail)")
		fs.BoolVar(&f.urlOnly, "url-only", false, "print only the proxy URL, for curl -x")
		fs.BoolVar(&f.idOnly, "id-only", false, "print only the lease ID, for a script's later renew, report or release")
	case "renew":
		fs.StringVar(&f.id, "id", "", "lease ID (required)")
		fs.Var(&f.ttl, "ttl", "new TTL: a duration or seconds; default the lease's own")
	case "release":
		fs.StringVar(&f.id, "id", "", "lease ID (required)")
	case "report":
		fs.StringVar(&f.id, "id", "", "lease ID (required)")
		fs.StringVar(&f.result, "result", "", "ok, blocked or failed (required)")
		fs.StringVar(&f.target, "target", "", "the site that blocked the proxy (required for blocked)")
		fs.Var(&f.cooldown, "cooldown", "cooldown: a duration or seconds; default the service's (10m blocked, 5m failed)")
		fs.BoolVar(&f.release, "release", false, "release the lease too")
	}
	return fs
}

// wrapGrant gives a grant the shape of the service's reply, {"lease": {...}}.
func wrapGrant(g any) any { return map[string]any{"lease": g} }

// leaseErr explains "nobody answered", the one error a user meets before any other.
func leaseErr(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no lease service is running (start egressd run with the leaser role): %w", err)
	}
	return err
}

func fail(stderr io.Writer, sub string, err error) int {
	fmt.Fprintf(stderr, "egressd lease %s: %v\n", sub, err)
	return 1
}

// parseSelector reads k=v,k=v.
func parseSelector(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q appears twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// tierFlags collects --tier, each a selector k=v,k=v, in the order given.
type tierFlags struct{ sels []map[string]string }

func (t *tierFlags) String() string { return "" }

func (t *tierFlags) Set(s string) error {
	sel, err := parseSelector(s)
	if err != nil {
		return err
	}
	if sel == nil {
		sel = map[string]string{} // an empty tier is every proxy the selector matches
	}
	t.sels = append(t.sels, sel)
	return nil
}

// ttlFlag is a duration given as 5m or as plain seconds, 300.
type ttlFlag struct{ d time.Duration }

func (t *ttlFlag) String() string {
	if t == nil || t.d == 0 {
		return ""
	}
	return t.d.String()
}

func (t *ttlFlag) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		t.d = time.Duration(n) * time.Second
	} else if t.d, err = time.ParseDuration(s); err != nil {
		return errors.New("use a duration such as 90s or 5m, or whole seconds")
	}
	if t.d <= 0 || t.d%time.Second != 0 {
		return errors.New("must be a positive whole number of seconds")
	}
	return nil
}
