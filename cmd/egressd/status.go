package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
	if what != "proxies" && what != "providers" && what != "probers" {
		fmt.Fprintf(stderr, "egressd status: unknown view %q (proxies, providers or probers)\n", what)
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
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressd status: unexpected argument %q (a view, proxies, providers or probers, comes before the flags)\n", fs.Arg(0))
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
		fmt.Fprintf(stderr, "egressd status %s: --phase, --provider and --selector select proxies; they do not apply here\n", what)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch what {
	case "probers":
		return showList(ctx, *natsURL, events.BucketProbers, fleet.Probers, *output == "json", printProbers, stdout, stderr)
	case "providers":
		return showList(ctx, *natsURL, events.BucketProviderHealth, fleet.Targets, *output == "json", printTargets, stdout, stderr)
	}
	fl, err := loadFleet(ctx, *natsURL)
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	rows := fl.Select(filter)
	if *output == "json" {
		writeJSON(stdout, rows)
		return 0
	}
	if len(rows) == 0 && len(fl.Rows) > 0 {
		fmt.Fprintf(stdout, "No proxies match (%d in the fleet).\n", len(fl.Rows))
		return 0
	}
	printTable(stdout, rows)
	return 0
}

// specsBudget bounds opening the proxies bucket: a viewer (deploy/nats) may not read specs,
// and its denied request only ends at a timeout.
const specsBudget = 3 * time.Second

// loadFleet reads the fleet through the read model (workers/fleet). Without read access to
// specs the rows come from statuses alone: no lease limits, attributes or probe intervals.
func loadFleet(ctx context.Context, url string) (*fleet.Fleet, error) {
	nc, err := dial(url, "egressd status", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	var b fleet.Buckets
	sctx, scancel := context.WithTimeout(ctx, specsBudget)
	b.Proxies, _ = openBucket(sctx, js, events.BucketProxies)
	scancel()
	for name, dst := range map[string]*jetstream.KeyValue{events.BucketStatus: &b.Status, events.BucketHealth: &b.Health} {
		if *dst, err = openBucket(ctx, js, name); err != nil {
			return nil, err
		}
	}
	// Not set up yet reads as no leases, as for the other buckets.
	if b.Leases, err = kvstore.OpenLeaseShards(ctx, js); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	fl := fleet.Load(ctx, b, time.Now())
	for _, e := range fl.Errors {
		if e.Bucket != events.BucketProxies {
			return nil, e
		}
	}
	return fl, nil
}

// openBucket opens a bucket for reading; one that does not exist yet is nil, which the read
// model reads as empty.
func openBucket(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	return kv, nil
}

func printTable(w io.Writer, rows []fleet.Row) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No proxies. Declare one with: nats kv put proxies p1 '{\"provider\":\"local\"}'")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tPROVIDER\tPHASE\tADDRESS\tHEALTHY\tLEASES\tREASON\tAGE")
	for _, r := range rows {
		healthy, max := string(r.Healthy), "?"
		if r.Healthy == fleet.HealthUnknown {
			healthy = "-"
		}
		if r.MaxLeases != nil {
			max = strconv.Itoa(*r.MaxLeases)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%s\t%s\t%s\n", r.Name, r.Mode, dash(r.Provider), r.Phase, dash(r.Address),
			healthy, r.Leases, max, dash(string(r.Reason)), r.Age)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Phase == events.PhaseInvalid || r.Phase == events.PhaseFailed {
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
