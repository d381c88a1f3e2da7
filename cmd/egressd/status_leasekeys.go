package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// showLeaseKeys is `egressd status leasekeys`: for each provider whose provisioner delivers
// lease keys to running proxies, the master rotation as it sees it and which masters each
// lease-mode proxy's keys derive from (decision 88). It reads the provisioners' reports, which
// name master IDs only, so a viewer may read it; `egressd lease-master status` (admin) adds
// the proxies no provisioner reports.
func showLeaseKeys(ctx context.Context, url string, asJSON bool, stdout, stderr io.Writer) int {
	reports, err := readLeaseKeys(ctx, url)
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	if asJSON {
		writeJSON(stdout, reports)
		return 0
	}
	printLeaseKeys(stdout, reports, time.Now())
	return 0
}

func readLeaseKeys(ctx context.Context, url string) ([]events.LeaseKeysReport, error) {
	r, err := dialReader(url, "egressd status")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	catalogKV, err := r.open(ctx, events.BucketCatalog)
	if err != nil {
		return nil, err
	}
	locks, err := r.open(ctx, events.BucketLocks)
	if err != nil || catalogKV == nil || locks == nil {
		return nil, err
	}
	catalogs, err := fleet.Catalogs(ctx, catalogKV)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(catalogs))
	for i, c := range catalogs {
		names[i] = c.Provider
	}
	return fleet.LeaseKeys(ctx, locks, names)
}

func printLeaseKeys(w io.Writer, reports []events.LeaseKeysReport, now time.Time) {
	if len(reports) == 0 {
		fmt.Fprintln(w, "no provider reports lease keys (no provisioner delivers keys to running proxies)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tPHASE\tMASTERS\tPROXY\tGENERATION\tHOLDS\tREPORTED")
	for _, r := range reports {
		age := now.Sub(r.At).Truncate(time.Second).String() + " ago"
		if len(r.Proxies) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t%s\n", r.Provider, r.Phase, strings.Join(r.Masters, ","), age)
		}
		for _, p := range r.Proxies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Provider, r.Phase, strings.Join(r.Masters, ","), p.Proxy, p.Generation,
				strings.Join(p.KeyIDs, ","), age)
		}
	}
	tw.Flush()
}
