package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// loadTargets reads every provider target's latest check, in config order.
func loadTargets(ctx context.Context, url string) ([]events.TargetHealth, error) {
	nc, err := dial(url, "egressd status", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := openBucket(ctx, js, events.BucketProviderHealth)
	if err != nil {
		return nil, err
	}
	return fleet.Targets(ctx, kv)
}

func printTargets(w io.Writer, targets []events.TargetHealth) {
	if len(targets) == 0 {
		fmt.Fprintln(w, "No provider checks yet (they run every --check-interval on the provisioners).")
		return
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tTARGET\tREADY\tREASON\tLATENCY\tCHECKED\tSINCE\tMESSAGE")
	for _, t := range targets {
		msg := t.Message
		if len(msg) > 80 {
			msg = msg[:77] + "..."
		}
		ready := "False"
		if t.Ready {
			ready = "True"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fms\t%s ago\t%s\t%s\n", t.Provider, t.Target, ready, t.Reason, t.LatencyMs,
			events.Age(now, t.CheckedAt), events.Age(now, t.LastTransitionTime), dash(msg))
	}
	tw.Flush()
}
