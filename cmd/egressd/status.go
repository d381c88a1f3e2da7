package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// statusViews are the views of `egressd status`; proxies is the default.
var statusViews = []string{"proxies", "pools", "providers", "probers", "holders", "leases", "cooldowns", "rollouts", "leasekeys", "quarantine"}

// listFlag is a flag that may be repeated; each value may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// writeJSON prints list as indented JSON; an empty list is [], not null.
func writeJSON[T any](w io.Writer, list []T) {
	if list == nil {
		list = []T{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(list)
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	what := "proxies"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		what, args = args[0], args[1:]
	}
	if !slices.Contains(statusViews, what) {
		fmt.Fprintf(stderr, "egressd status: unknown view %q (proxies, pools, providers, probers, holders, leases, cooldowns, rollouts, leasekeys or quarantine)\n", what)
		return 2
	}
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	output := fs.String("o", "table", "output: table or json")
	var in fleet.FilterInput
	fs.Var((*listFlag)(&in.Phases), "phase", "only proxies in these phases (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&in.Providers), "provider", "only proxies of these providers; external proxies have provider external (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&in.Selectors), "selector", "only proxies with this attribute, key=value, matched exactly (repeatable, or comma-separated; all must match)")
	fs.Var((*listFlag)(&in.Pools), "pool", "only members of these pools, by their spec's owner (repeatable, or comma-separated)")
	holder := fs.String("holder", "", "leases view: only this holder's leases (\"\" for leases acquired without one, with -holder=)")
	check := fs.Bool("check", false, "proxies and pools views: exit 3 when a proxy or pool shown is Invalid or Failed (the proxies view also judges every pool, unless --phase, --provider, --selector or --pool narrow it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\nThe view comes first; the flags follow it. Flags:\n", commandUsage("status"))
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressd status: unexpected argument %q (a view, proxies, pools, providers, probers, holders, leases, cooldowns, rollouts, leasekeys or quarantine, comes before the flags)\n", fs.Arg(0))
		return 2
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "egressd status: -o %q: use table or json\n", *output)
		return 2
	}
	filter, err := fleet.ParseFilter(in)
	if err != nil {
		fmt.Fprintf(stderr, "egressd status: --%v\n", err)
		return 2
	}
	if what != "proxies" && !filter.Empty() {
		fmt.Fprintf(stderr, "egressd status %s: --phase, --provider, --selector and --pool select proxies; they do not apply here\n", what)
		return 2
	}
	var holderSet *string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "holder" {
			holderSet = holder
		}
	})
	if *check && what != "proxies" && what != "pools" {
		fmt.Fprintf(stderr, "egressd status %s: --check judges proxies and pools; use egressd status --check or egressd status pools --check\n", what)
		return 2
	}
	if holderSet != nil && what != "leases" {
		fmt.Fprintf(stderr, "egressd status %s: --holder selects leases; use egressd status leases --holder %s\n", what, *holder)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if code, ok := showView(ctx, *natsURL, what, holderSet, *output == "json", stdout, stderr); ok {
		return code
	}
	return showFleet(ctx, *natsURL, what, filter, *output == "json", *check, stdout, stderr)
}

// showFleet is the proxies and pools views, judged with --check.
func showFleet(ctx context.Context, natsURL, what string, filter fleet.Filter, asJSON, check bool, stdout, stderr io.Writer) int {
	// The proxies view reads the pools' buckets only to select by pool or to judge them
	// (--check), so a viewer the deployment does not let read them still gets its table.
	fl, err := loadFleet(ctx, natsURL, what == "pools" || len(filter.Pools) > 0 || (check && filter.Empty()))
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	code := reportReadErrors(stderr, fl.Errors)
	if what == "pools" {
		if asJSON {
			writeJSON(stdout, fl.Pools)
		} else {
			printPools(stdout, fl.Pools, fl.At)
		}
		if check {
			code = max(code, judge(stderr, nil, fl.Pools))
		}
		return code
	}
	rows := fl.Select(filter)
	switch {
	case asJSON:
		writeJSON(stdout, rows)
	case len(rows) == 0 && len(fl.Rows) > 0:
		fmt.Fprintf(stdout, "No proxies match (%d in the fleet).\n", len(fl.Rows))
	default:
		printTable(stdout, rows)
	}
	if check {
		var pools []fleet.PoolRow
		if filter.Empty() {
			pools = fl.Pools
		}
		code = max(code, judge(stderr, rows, pools))
	}
	return code
}

// exitProblems is the exit code of status --check when something is Invalid or Failed: apart
// from 1 (could not read) and 2 (usage), so a script can tell "broken" from "unknown".
const exitProblems = 3

// judge prints, for status --check, each proxy and pool that egressd will not act on as it
// stands (Invalid: fix its document) or has given up on (Failed: change its spec), and
// returns exitProblems if there is one.
func judge(w io.Writer, rows []fleet.Row, pools []fleet.PoolRow) int {
	n := 0
	for _, r := range rows {
		if r.Phase == events.PhaseInvalid || r.Phase == events.PhaseFailed {
			n++
			fmt.Fprintf(w, "proxy %s is %s: %s\n", r.Name, r.Phase, dash(r.Message))
		}
	}
	for _, p := range pools {
		if p.Phase == events.PoolInvalid {
			n++
			fmt.Fprintf(w, "pool %s is %s: %s\n", p.Name, p.Phase, dash(p.Message))
		}
	}
	if n == 0 {
		return 0
	}
	fmt.Fprintf(w, "egressd status --check: %d Invalid or Failed\n", n)
	return exitProblems
}

// loadFleet reads the fleet through the read model (readside/fleet). A bucket that cannot be
// opened or read is in the fleet's Errors, its part left empty, and the rest is read all the
// same. A denied read fails at once (reader): the viewer of deploy/nats may not read specs, and
// gets its rows from the statuses alone, without lease limits, attributes or probe intervals.
// With pools, it also reads pools, pool_status and pool_demand.
func loadFleet(ctx context.Context, url string, pools bool) (*fleet.Fleet, error) {
	r, err := dialReader(url, "egressd status")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var (
		b    fleet.Buckets
		errs []fleet.ReadError
	)
	type bucket struct {
		name string
		dst  *jetstream.KeyValue
	}
	buckets := []bucket{{events.BucketProxies, &b.Proxies}, {events.BucketStatus, &b.Status}, {events.BucketHealth, &b.Health}}
	if pools {
		buckets = append(buckets, bucket{events.BucketPools, &b.Pools}, bucket{events.BucketPoolStatus, &b.PoolStatus},
			bucket{events.BucketPoolDemand, &b.PoolDemand})
	}
	for _, o := range buckets {
		if *o.dst, err = r.open(ctx, o.name); err != nil {
			errs = append(errs, fleet.ReadError{Bucket: o.name, Err: err})
		}
	}
	// Not set up yet reads as no leases, as for the other buckets.
	if b.Leases, err = kvstore.OpenLeaseShards(ctx, r.js); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		errs = append(errs, fleet.ReadError{Bucket: events.LeaseBucket(0), Err: err})
	}
	fl := fleet.Load(ctx, b, time.Now())
	fl.Errors = append(fl.Errors, errs...)
	slices.SortFunc(fl.Errors, func(a, b fleet.ReadError) int { return strings.Compare(a.Bucket, b.Bucket) })
	return fl, nil
}

// reportReadErrors prints what could not be read and returns the exit code: 1, except when
// the only failures are specs the user may not read (the viewer: proxy and pool specs hold
// passwords and user-data), which status is built for.
func reportReadErrors(w io.Writer, errs []fleet.ReadError) int {
	code := 0
	for _, e := range errs {
		var de *deniedError
		if errors.As(e.Err, &de) {
			switch e.Bucket {
			case events.BucketProxies:
				fmt.Fprintf(w, "egressd status: %v; rows come from the statuses alone (no lease limits, attributes, pools or overdue judgement)\n", e)
				continue
			case events.BucketPools:
				fmt.Fprintf(w, "egressd status: %v; pools come from the controller's statuses alone (no desired replicas)\n", e)
				continue
			case events.BucketPoolDemand:
				fmt.Fprintf(w, "egressd status: %v; the leasers' demand is not shown\n", e)
				continue
			}
		}
		fmt.Fprintln(w, "egressd status:", e)
		code = 1
	}
	return code
}

func printTable(w io.Writer, rows []fleet.Row) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No proxies. Declare one with: nats kv put proxies p1 '{\"provider\":\"local\"}'")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tPROVIDER\tPHASE\tADDRESS\tHEALTHY\tANONYMITY\tLEASES\tREASON\tAGE")
	for _, r := range rows {
		healthy := string(r.Healthy)
		if r.Healthy == fleet.HealthUnknown {
			healthy = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Mode, dash(r.Provider), r.Phase, dash(r.Address),
			healthy, dash(string(r.Anonymity)), r.LeasesText(), dash(string(r.Reason)), r.Age)
	}
	tw.Flush()
	for _, r := range rows {
		// The messages that need reading: why nothing is done, and what a proxy reveals (the
		// leaked headers, by name) or where its traffic really leaves from.
		if r.Message != "" && (r.Phase == events.PhaseInvalid || r.Phase == events.PhaseFailed || r.Reason == events.ReasonHeaderLeak || r.Reason == events.ReasonEgressMismatch) {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Message)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// showView is each view but proxies and pools (showFleet); ok is false for those two.
func showView(ctx context.Context, natsURL, what string, holderSet *string, asJSON bool, stdout, stderr io.Writer) (code int, ok bool) {
	switch what {
	case "holders", "leases":
		return showLeases(ctx, natsURL, what, holderSet, asJSON, stdout, stderr), true
	case "probers":
		return showList(ctx, natsURL, events.BucketProbers, fleet.Probers, asJSON, printProbers, stdout, stderr), true
	case "providers":
		return showProviders(ctx, natsURL, asJSON, stdout, stderr), true
	case "cooldowns":
		return showList(ctx, natsURL, events.BucketCooldowns, func(ctx context.Context, kv jetstream.KeyValue) ([]fleet.CooldownRow, error) {
			return fleet.Cooldowns(ctx, kv, time.Now())
		}, asJSON, printCooldowns, stdout, stderr), true
	case "quarantine":
		return showList(ctx, natsURL, events.BucketQuarantine, func(ctx context.Context, kv jetstream.KeyValue) ([]events.Quarantine, error) {
			return fleet.Quarantine(ctx, kv, time.Now())
		}, asJSON, printQuarantine, stdout, stderr), true
	case "rollouts":
		return showList(ctx, natsURL, events.BucketStatus, readRollouts, asJSON, printRollouts, stdout, stderr), true
	case "leasekeys":
		return showLeaseKeys(ctx, natsURL, asJSON, stdout, stderr), true
	}
	return 0, false
}
