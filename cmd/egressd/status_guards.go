package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// showProviders is `egressd status providers`: each provider's guard rails (instances against
// maxInstances, creates against the rate, what waits), then each target's check, instances
// and brake. It reads the statuses, the catalogs and the checks, all of which the viewer may
// read (never a spec: specs hold secrets).
func showProviders(ctx context.Context, url string, asJSON bool, stdout, stderr io.Writer) int {
	r, err := dialReader(url, "egressd status")
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	defer r.Close()
	open := func(bucket string) jetstream.KeyValue {
		if err != nil {
			return nil
		}
		var kv jetstream.KeyValue
		kv, err = r.open(ctx, bucket)
		return kv
	}
	checksKV, catalogKV, statusKV := open(events.BucketProviderHealth), open(events.BucketCatalog), open(events.BucketStatus)
	var checks []events.TargetHealth
	var catalogs []events.CatalogRecord
	if err == nil {
		checks, err = fleet.Targets(ctx, checksKV)
	}
	if err == nil {
		catalogs, err = fleet.Catalogs(ctx, catalogKV)
	}
	var fl *fleet.Fleet
	if err == nil {
		fl = fleet.Load(ctx, fleet.Buckets{Status: statusKV}, time.Now())
		if len(fl.Errors) > 0 {
			err = fmt.Errorf("read %s: %w", fl.Errors[0].Bucket, fl.Errors[0].Err)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	guards := fleet.Guards(fl.Rows, catalogs, checks, fl.At)
	if asJSON {
		writeJSON(stdout, guards)
		return 0
	}
	printGuards(stdout, guards, fl.At)
	return 0
}

// printGuards prints the providers' table, then the targets'.
func printGuards(w io.Writer, guards []fleet.ProviderGuard, now time.Time) {
	if len(guards) == 0 {
		fmt.Fprintln(w, "No providers yet (a provisioner publishes its provider's catalog at start).")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tINSTANCES\tCREATES/MIN\tWAITING")
	for _, g := range guards {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Provider, ofLimit(g.Instances, g.MaxInstances), ofLimit(g.CreatesLastMinute, g.MaxCreatesPerMinute), waitingText(g.Waiting))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tTARGET\tREADY\tREASON\tINSTANCES\tBRAKE\tLATENCY\tCHECKED\tSINCE\tMESSAGE")
	for _, g := range guards {
		for _, t := range g.Targets {
			brake := "-"
			if t.Suspect != nil {
				brake = fmt.Sprintf("Suspect (%d/%d Unhealthy)", t.Suspect.Unhealthy, t.Suspect.Total)
			}
			c := t.Check
			if c == nil {
				fmt.Fprintf(tw, "%s\t%s\t?\t-\t%s\t%s\t-\t-\t-\tnot checked yet\n", g.Provider, t.Target, ofLimit(t.Instances, t.MaxInstances), brake)
				continue
			}
			msg := c.Message
			if len(msg) > 80 {
				msg = msg[:77] + "..."
			}
			ready := "False"
			if c.Ready {
				ready = "True"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1fms\t%s ago\t%s\t%s\n", g.Provider, t.Target, ready, c.Reason, ofLimit(t.Instances, t.MaxInstances), brake, c.LatencyMs, events.Age(now, c.CheckedAt), events.Age(now, c.LastTransitionTime), dash(msg))
		}
	}
	tw.Flush()
}

// ofLimit is "n/max", or "n" without a limit.
func ofLimit(n, max int) string {
	if max <= 0 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d/%d", n, max)
}

// waitingText lists the proxies each guard rail holds back, "-" for none.
func waitingText(by map[events.Reason]int) string {
	var parts []string
	for _, r := range fleet.HeldBackReasons {
		if by[r] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[r], r))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
