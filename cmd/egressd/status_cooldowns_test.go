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

func TestPrintQuarantine(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		rows []events.Quarantine
		want []string
	}{
		{"none", nil, []string{"No addresses in quarantine"}},
		{"a burned address", []events.Quarantine{{V: 1, Address: "127.0.62.2", Prefix: "127.0.62.2/32", Pool: "web", Proxy: "web-a1b2c",
			Reason: events.ReasonBurned, At: now.Add(-5 * time.Minute), Until: now.Add(23 * time.Hour)}},
			[]string{"ADDRESS", "UNTIL", "127.0.62.2/32", "web-a1b2c", "5m ago", "(in 22h"}},
	} {
		var b bytes.Buffer
		printQuarantine(&b, c.rows)
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, b.String())
			}
		}
	}
}
