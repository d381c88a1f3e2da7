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
		if (p.Phase == events.PoolInvalid || p.Phase == events.PoolDegraded) && p.Message != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, p.Message)
		}
		if s := p.Suspect; s != nil {
			fmt.Fprintf(w, "%s: %s\n", p.Name, s)
		}
		if d := p.Demand; d != nil {
			fmt.Fprintf(w, "%s: demand %s\n", p.Name, demandText(*d))
		}
		if a := p.Autoscale; a != nil {
			fmt.Fprintf(w, "%s: %s\n", p.Name, autoscaleText(*a, now))
		}
	}
}

// demandText is a pool's demand in one line: "6 waiting, 2 refused, 8 held, 1.5 grants/s (2 leasers)".
func demandText(d events.DemandSum) string {
	return fmt.Sprintf("%d waiting, %d refused, %d held, %.3g grants/s (%d leasers)", d.Waiting, d.Refused, d.Held, d.GrantsPerSecond, d.Leasers)
}

// autoscaleText is a pool's autoscale in one line: its bounds, what demand asks for and from
// what, the last decision, and the next possible scale-down.
func autoscaleText(a fleet.AutoscaleRow, now time.Time) string {
	out := fmt.Sprintf("autoscale %d to %d", a.Min, a.Max)
	st := a.State
	if st == nil {
		return out + ", no decision yet"
	}
	in := st.Inputs
	out += fmt.Sprintf(", wants %d (%d held of %d on %d Ready, %d waiting, %d refused, target %g)",
		in.Wanted, in.Held, in.Capacity, in.Ready, in.Waiting, in.Refused, in.Target)
	if st.LastDecision != "" {
		out += fmt.Sprintf("; last %s, %s ago", st.LastDecision, events.Age(now, st.LastDecisionAt))
	}
	if !st.NextScaleDown.IsZero() {
		out += "; next scale-down " + fleet.Until(now, st.NextScaleDown)
	}
	if st.Held != "" {
		out += "; " + st.Held
	}
	return out
}
