package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

func TestPrintCooldowns(t *testing.T) {
	until := time.Now().Add(90 * time.Second)
	for _, c := range []struct {
		name string
		rows []fleet.CooldownRow
		want []string
	}{
		{"none", nil, []string{"No cooldowns"}},
		{"escalated block and a failure", []fleet.CooldownRow{
			{Proxy: "px-1", Target: "shop.example", Result: events.ReportBlocked, Holder: "crawler-7", Until: until, Strikes: 3},
			{Proxy: "px-2", Result: events.ReportFailed, Until: until},
			{Proxy: "px-3", Target: "shop.example", Result: events.CooldownNeighbour, Until: until, Because: "px-1"},
		}, []string{"neighbour of px-1", "PROXY", "STRIKES", "px-1", "shop.example", "blocked", " 3 ", "crawler-7", "px-2", "(every target)", "failed", "(in 1m"}},
	} {
		var b bytes.Buffer
		printCooldowns(&b, c.rows)
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, b.String())
			}
		}
	}
}
