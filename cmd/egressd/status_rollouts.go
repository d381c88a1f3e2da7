package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// readRollouts is the progress of every rollout under way, from the proxies' statuses
// (status.rollout, decision 86).
func readRollouts(ctx context.Context, kv jetstream.KeyValue) ([]events.RolloutProgress, error) {
	if kv == nil {
		return nil, fmt.Errorf("bucket %s not found", events.BucketStatus)
	}
	entries, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, err
	}
	var statuses []events.ProxyStatus
	for _, e := range entries {
		var st events.ProxyStatus
		if json.Unmarshal(e.Value(), &st) == nil {
			statuses = append(statuses, st)
		}
	}
	return events.RolloutsOf(statuses), nil
}

// printRollouts shows each rollout under way: "12/40 replaced, 3 draining".
func printRollouts(w io.Writer, list []events.RolloutProgress) {
	if len(list) == 0 {
		fmt.Fprintln(w, "No rollout under way: every instance follows its spec.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tPROXIES\tREPLACED\tDRAINING\tREPLACING\tWAITING\tPAUSED\tPROGRESS")
	for _, p := range list {
		paused := "-"
		if p.Paused {
			paused = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Scope, p.Total, p.Replaced(), p.Draining, p.Replacing, p.Waiting, paused, p.String())
	}
	tw.Flush()
}
