package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// statsCmd shows block rates from the leasers' statistics (EGRESS_LEASE_STATS) over a
// window, through the read model the status page's /api/stats.json shares.
func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	var in fleet.StatsInput
	fs.StringVar(&in.Since, "since", "1h", "the window: sums stored this long ago until now (15m, 1h, 7d, ...)")
	fs.StringVar(&in.By, "by", "target", "group by target, proxy, provider or pool")
	fs.StringVar(&in.Sort, "sort", "rate", "order: rate (highest block rate first) or blocked (most blocked reports first)")
	fs.StringVar(&in.Top, "top", strconv.Itoa(fleet.DefaultStatsTop), "show this many rows (0: all)")
	fs.Var((*listFlag)(&in.Targets), "target", "only these targets (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&in.Proxies), "proxy", "only these proxies (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&in.Providers), "provider", "only proxies of these providers (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&in.Pools), "pool", "only members of these pools (repeatable, or comma-separated)")
	asJSON := fs.Bool("json", false, "print the sums and their time series as JSON, as /api/stats.json does")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressd stats: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	q, err := fleet.ParseStatsQuery(in)
	if err != nil {
		fmt.Fprintf(stderr, "egressd stats: --%v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	nc, err := dial(*natsURL, "egressd stats", defaultDialTimeout)
	if err != nil {
		fmt.Fprintln(stderr, "egressd stats:", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(stderr, "egressd stats:", err)
		return 1
	}
	st, err := fleet.LoadStats(ctx, js, q, time.Now())
	if err != nil {
		fmt.Fprintln(stderr, "egressd stats:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return 0
	}
	printStats(stdout, st, q)
	return 0
}

// printStats prints the rows as a table with the total last, or says why there are none.
func printStats(w io.Writer, st *fleet.Stats, q fleet.StatsQuery) {
	window := fleet.FormatWindow(q.Since)
	if st.Records == 0 {
		fmt.Fprintf(w, "No lease statistics in the last %s. Each leaser publishes its sums when an interval ends "+
			"(events.stats.interval, 1m by default), so traffic shows here up to one interval later.\n", window)
		return
	}
	if len(st.Rows) == 0 {
		fmt.Fprintf(w, "No statistics match the filters (%s in the last %s).\n", records(st.Records), window)
		return
	}
	order := "block rate"
	if q.Sort == fleet.SortByBlocked {
		order = "blocked reports"
	}
	fmt.Fprintf(w, "Block rate by %s over the last %s, highest %s first (%s, one per %s; the current interval shows once it ends).\n",
		q.By, window, order, records(st.Records), fleet.FormatWindow(time.Duration(st.IntervalSeconds)*time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	head := strings.ToUpper(string(q.By))
	if q.By == fleet.StatsByProxy {
		head += "\tPROVIDER\tPOOL"
	}
	fmt.Fprintln(tw, head+"\tLEASES\tREPORTS\tBLOCKED\tFAILED\tBLOCK RATE")
	line := func(key string, r fleet.StatsRow) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", key, r.Leases, r.Reports, r.Blocked, r.Failed, r.RateText())
	}
	for _, r := range st.Rows {
		key := statsKeyText(q.By, r.Key)
		if q.By == fleet.StatsByProxy {
			key += "\t" + dash(r.Provider) + "\t" + dash(r.Pool)
		}
		line(key, r)
	}
	total := "(total)"
	if q.By == fleet.StatsByProxy {
		total += "\t\t"
	}
	line(total, st.Total)
	tw.Flush()
	if st.More > 0 {
		fmt.Fprintf(w, "%d more (--top 0 shows all).\n", st.More)
	}
}

// statsKeyText names a group whose key is empty.
func statsKeyText(by fleet.StatsGroup, key string) string {
	if key != "" {
		return key
	}
	switch by {
	case fleet.StatsByTarget:
		return "(no target)"
	case fleet.StatsByPool:
		return "(no pool)"
	}
	return "(unknown)"
}

func records(n int) string {
	if n == 1 {
		return "1 leaser record"
	}
	return strconv.Itoa(n) + " leaser records"
}
