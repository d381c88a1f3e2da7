package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
)

// printQuarantine shows each address in quarantine: the neighbourhood kept from new
// instances, the member burned on it, and until when.
func printQuarantine(w io.Writer, rows []events.Quarantine) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No addresses in quarantine: no pool member was recycled as burned lately.")
		return
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tPREFIX\tINSTANCE\tPOOL\tBURNED MEMBER\tSINCE\tUNTIL")
	for _, q := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\t%s (in %s)\n", q.Address, q.Prefix, dash(q.Instance), dash(q.Pool), dash(q.Proxy),
			events.Age(now, q.At), q.Until.Local().Format(time.DateTime), events.Age(q.Until, now))
	}
	tw.Flush()
}
