package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
)

// showLeases is `egressd status holders` (who holds the fleet's proxies, summed) and
// `egressd status leases` (every held lease, optionally of one holder), both from
// fleet.LoadLeases.
func showLeases(ctx context.Context, url, what string, holder *string, asJSON bool, stdout, stderr io.Writer) int {
	r, err := dialReader(url, "egressd status")
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	defer r.Close()
	shards, err := kvstore.OpenLeaseShards(ctx, r.js)
	if err != nil {
		fmt.Fprintf(stderr, "egressd status: %s: %v\n", events.LeaseBucket(0), err)
		return 1
	}
	l := fleet.LoadLeases(ctx, shards, time.Now())
	code := reportReadErrors(stderr, l.Errors)
	switch {
	case what == "holders" && asJSON:
		writeJSON(stdout, l.Holders)
	case what == "holders":
		printHolders(stdout, l)
	case asJSON && holder != nil:
		writeJSON(stdout, l.Of(*holder))
	case asJSON:
		writeJSON(stdout, l.Rows)
	default:
		rows := l.Rows
		if holder != nil {
			rows = l.Of(*holder)
		}
		printLeaseRows(stdout, rows, len(l.Rows), l.At)
	}
	return code
}

const noHolder = "(none)"

func holderText(h string) string {
	if h == "" {
		return noHolder
	}
	return h
}

func printHolders(w io.Writer, l *fleet.Leases) {
	if len(l.Holders) == 0 {
		fmt.Fprintln(w, "No leases are held.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "HOLDER\tLEASES\tPROXIES\tTARGETS\tSESSIONS\tOLDEST\tNEXT-EXPIRY")
	for _, h := range l.Holders {
		oldest := "-"
		if !h.Oldest.IsZero() {
			oldest = events.Age(l.At, h.Oldest)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", holderText(h.Holder), h.Leases, h.Proxies, h.Targets, h.Sessions, oldest, fleet.Until(l.At, h.NextExpiry))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d leases by %d holders.\n", len(l.Rows), len(l.Holders))
}

func printLeaseRows(w io.Writer, rows []fleet.LeaseRow, all int, now time.Time) {
	switch {
	case len(rows) == 0 && all > 0:
		fmt.Fprintf(w, "No leases match (%d held).\n", all)
		return
	case len(rows) == 0:
		fmt.Fprintln(w, "No leases are held.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "HOLDER\tPROXY\tSLOT\tTARGET\tSESSION\tCAPPED\tAGE\tEXPIRES")
	for _, r := range rows {
		age := "-"
		if !r.AcquiredAt.IsZero() {
			age = events.Age(now, r.AcquiredAt)
		}
		capped := "no"
		if r.Capped {
			capped = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", holderText(r.Holder), r.Proxy, r.Slot, dash(r.Target), dash(r.Sticky), capped, age, fleet.Until(now, r.ExpiresAt))
	}
	tw.Flush()
}
