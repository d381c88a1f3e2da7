package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// printCooldowns shows each running cooldown: which proxy is kept from which target, why,
// by whom, until when, and (with escalating cooldowns) how many blocks in a row it is.
func printCooldowns(w io.Writer, rows []fleet.CooldownRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No cooldowns: no proxy is kept from any target.")
		return
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PROXY	TARGET	REPORT	STRIKES	BY	UNTIL")
	for _, c := range rows {
		target, strikes, report := c.Target, "-", string(c.Result)
		if target == "" {
			target = "(every target)"
		}
		if c.Because != "" {
			report += " of " + c.Because
		}
		if c.Strikes > 0 {
			strikes = strconv.Itoa(c.Strikes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s (in %s)\n", c.Proxy, target, report, strikes, dash(c.Holder),
			c.Until.Local().Format(time.TimeOnly), events.Age(c.Until, now))
	}
	tw.Flush()
}
