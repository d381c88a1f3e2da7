package fleet

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

func TestParseFilter(t *testing.T) {
	for _, c := range []struct {
		name string
		in   FilterInput
		want string // fmt of the filter, or the error's text
	}{
		{"empty", FilterInput{}, "{[] [] map[]  []}"},
		{"phases repeated and comma-separated, any case", FilterInput{Phases: []string{"ready,Running", " unhealthy ", "Ready"}},
			"{[Ready Running Unhealthy] [] map[]  []}"},
		{"providers", FilterInput{Providers: []string{"local,kvm-home", "external"}}, "{[] [local kvm-home external] map[]  []}"},
		{"selectors", FilterInput{Selectors: []string{"geo=de,tier=general", "note=a=b", "empty="}},
			"{[] [] map[empty: geo:de note:a=b tier:general]  []}"},
		{"name", FilterInput{Name: " crawl- "}, "{[] [] map[] crawl- []}"},
		{"pools", FilterInput{Pools: []string{"crawl,web", " "}}, "{[] [] map[]  [crawl web]}"},
		{"unknown phase", FilterInput{Phases: []string{"Redy"}}, `error: phase "Redy": not a phase; one of Pending, Invalid,`},
		{"selector without =", FilterInput{Selectors: []string{"geo"}}, `error: selector "geo": want key=value with a key`},
		{"selector without key", FilterInput{Selectors: []string{"=de"}}, `error: selector "=de": want key=value with a key`},
		{"selector key twice", FilterInput{Selectors: []string{"geo=de", "geo=fr"}}, `error: selector "geo=fr": key "geo" is already given (as "de")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseFilter(c.in)
			got := fmt.Sprint(f)
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.HasPrefix(got, c.want) {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	rows := []Row{
		{Name: "crawl-de-1", Phase: events.PhaseReady, Provider: "local", Attributes: map[string]string{"geo": "de", "tier": "general"}},
		{Name: "crawl-de-2", Phase: events.PhaseRunning, Provider: "kvm-home", Attributes: map[string]string{"geo": "de"}, Pool: "crawl"},
		{Name: "office", Phase: events.PhaseReady, Provider: events.External},
		{Name: "crawl-fr-1", Phase: events.PhaseFailed, Provider: "local", Attributes: map[string]string{"geo": "fr"}},
		// A pool attribute written by hand does not make a member: --pool goes by the owner.
		{Name: "crawl-x1y2z", Phase: events.PhaseDraining, Provider: "local", Attributes: map[string]string{"pool": "crawl"}, Pool: "other"},
	}
	fl := &Fleet{Rows: rows}
	for _, c := range []struct {
		in   FilterInput
		want string
	}{
		{FilterInput{}, "crawl-de-1 crawl-de-2 office crawl-fr-1 crawl-x1y2z"},
		{FilterInput{Pools: []string{"crawl"}}, "crawl-de-2"},
		{FilterInput{Pools: []string{"crawl,other"}}, "crawl-de-2 crawl-x1y2z"},
		{FilterInput{Selectors: []string{"pool=crawl"}}, "crawl-x1y2z"},
		{FilterInput{Phases: []string{"draining"}}, "crawl-x1y2z"},
		{FilterInput{Phases: []string{"Ready"}}, "crawl-de-1 office"},
		{FilterInput{Phases: []string{"Ready,Failed"}, Providers: []string{"local"}}, "crawl-de-1 crawl-fr-1"},
		{FilterInput{Selectors: []string{"geo=de"}}, "crawl-de-1 crawl-de-2"},
		{FilterInput{Selectors: []string{"geo=de", "tier=general"}}, "crawl-de-1"},
		{FilterInput{Selectors: []string{"geo=DE"}}, ""}, // exact values
		{FilterInput{Providers: []string{"external"}}, "office"},
		{FilterInput{Name: "de-"}, "crawl-de-1 crawl-de-2"},
		{FilterInput{Name: "de-", Phases: []string{"running"}}, "crawl-de-2"},
	} {
		f, err := ParseFilter(c.in)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range fl.Select(f) {
			names = append(names, r.Name)
		}
		if got := strings.Join(names, " "); got != c.want {
			t.Errorf("%+v: %q, want %q", c.in, got, c.want)
		}
	}
}
