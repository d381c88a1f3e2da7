package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// printPools shows each pool as the read model judges it: its members counted from the
// fleet's rows, the controller's phase and reason, and when the next member rotates.
func printPools(w io.Writer, pools []fleet.PoolRow, now time.Time) {
	if len(pools) == 0 {
		fmt.Fprintln(w, `No pools. Declare one with: nats kv put pools crawl '{"replicas":3,"template":{"provider":"local"}}'`)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tDESIRED\tMEMBERS\tREADY\tLEASED\tDRAINING\tOLDEST\tNEXT-ROTATION\tREASON")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Name, p.Phase, p.DesiredText(), p.Members, p.Ready, p.Leased, p.Draining,
			p.Oldest, fleet.Until(now, p.NextRotation), dash(string(p.Reason)))
	}
	tw.Flush()
	// The message is the point of a pool the controller cannot act on or cannot keep whole.
	for _, p := range pools {
		if (p.Phase == events.PoolInvalid || p.Phase == events.PoolDegraded || p.Reason == events.ReasonPlacementFallback) && p.Message != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, p.Message)
		}
		if s := p.Suspect; s != nil {
			fmt.Fprintf(w, "%s: %s\n", p.Name, s)
		}
		if d := p.Demand; d != nil {
			fmt.Fprintf(w, "%s: demand %s\n", p.Name, d)
		}
		if a := p.Autoscale; a != nil {
			fmt.Fprintf(w, "%s: %s\n", p.Name, a.Text(now))
		}
		if b := p.BootText(); b != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, b)
		}
		if pl := p.PlacementsText(now); pl != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, pl)
		}
	}
}
