package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
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
		showWaiters(ctx, r.js, l.At, stdout, stderr)
	}
	return code
}

// showWaiters prints the acquires waiting for a slot (docs/leases.md#waiting), oldest first.
// Where they cannot be read (a viewer of a deployment older than them) it says so on stderr,
// and the leases stand.
func showWaiters(ctx context.Context, js jetstream.JetStream, now time.Time, stdout, stderr io.Writer) {
	kv, err := js.KeyValue(ctx, events.BucketLeaseState)
	var w *fleet.Waiters
	if err == nil {
		w, err = fleet.LoadWaiters(ctx, kv, now)
	}
	if err != nil {
		fmt.Fprintf(stderr, "egressd status: waiting acquires: %v\n", err)
		return
	}
	if len(w.Rows) == 0 {
		fmt.Fprintln(stdout, "No acquires wait for a slot.")
		return
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "WAITING\tHOLDER\tSELECTOR\tTARGET\tLEASER\tWAITED\tGIVES-UP")
	for i, r := range w.Rows {
		place, until := strconv.Itoa(i+1), fleet.Until(now, r.Deadline)
		if r.Expired {
			place, until = "-", "expired (its leaser is gone)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", place, holderText(r.Holder), dash(selectorText(r.Selector)), dash(r.Target),
			dash(r.Worker), events.Age(now, r.Since), until)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d acquires wait for a slot, the longest for %s.\n", w.Live(), w.Oldest().Round(time.Second))
}

// selectorText is a selector as k=v,k=v, sorted.
func selectorText(sel map[string]string) string {
	parts := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
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
