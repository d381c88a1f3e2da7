package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// showList is a status view of one bucket's records (providers, probers): read on a
// connection of its own, printed as JSON or as the view's table.
func showList[T any](ctx context.Context, url, bucket string, read func(context.Context, jetstream.KeyValue) ([]T, error),
	asJSON bool, table func(io.Writer, []T), stdout, stderr io.Writer) int {
	list, err := readBucket(ctx, url, bucket, read)
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	if asJSON {
		writeJSON(stdout, list)
	} else {
		table(stdout, list)
	}
	return 0
}

// readBucket opens one bucket on a connection of its own and reads it with read.
func readBucket[T any](ctx context.Context, url, bucket string, read func(context.Context, jetstream.KeyValue) ([]T, error)) ([]T, error) {
	r, err := dialReader(url, "egressd status")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	kv, err := r.open(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return read(ctx, kv)
}

// printProbers shows each live prober: its share of the fleet and whether it keeps up.
func printProbers(w io.Writer, members []events.ProberMember) {
	if len(members) == 0 {
		fmt.Fprintln(w, "No probers running: no proxy is being probed (they show ProbeOverdue).")
		return
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "WORKER	MEMBER	FILTERS	OWNED	WAITING	LAG	CONCURRENCY	UP")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.1fs\t%d\t%s\n", m.Worker, m.ID, dash(strings.Join(m.Filters, ",")), m.Owned, m.Backlog,
			m.LagSeconds, m.Concurrency, events.Age(now, m.StartedAt))
	}
	tw.Flush()
}
