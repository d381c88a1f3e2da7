package fleet

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore/kvstoretest"
)

func TestParseStatsQuery(t *testing.T) {
	for _, c := range []struct {
		in   StatsInput
		want string // the query, or the error's start
	}{
		{StatsInput{}, "1h0m0s target rate 20 [] [] 0s"},
		{StatsInput{Since: "7d", By: "pool", Sort: "blocked", Top: "0", Pools: []string{"a,b", " b ", "c"}, Targets: []string{"x"}},
			"168h0m0s pool blocked 0 [a b c] [x] 0s"},
		{StatsInput{Since: "90m", Step: "5m"}, "1h30m0s target rate 20 [] [] 5m0s"},
		{StatsInput{Since: "1h", Step: "1h"}, "1h0m0s target rate 20 [] [] 1h0m0s"},
		{StatsInput{Since: "0s"}, `since "0s"`},
		{StatsInput{Since: "367d"}, `since "367d"`},
		{StatsInput{Since: "xd"}, `since "xd"`},
		{StatsInput{Since: "106751991167300d"}, `since "106751991167300d"`}, // 24h times it wraps around
		{StatsInput{By: "holder"}, `by "holder"`},
		{StatsInput{Sort: "name"}, `sort "name"`},
		{StatsInput{Top: "10001"}, `top "10001"`},
		{StatsInput{Top: "-1"}, `top "-1"`},
		{StatsInput{Step: "61m"}, `step "61m"`},
		{StatsInput{Step: "999ms"}, `step "999ms"`},
	} {
		q, err := ParseStatsQuery(c.in)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = strings.Join([]string{q.Since.String(), string(q.By), string(q.Sort), strconv.Itoa(q.Top), list(q.Pools), list(q.Targets), q.Step.String()}, " ")
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: %s, want %s", c.in, got, c.want)
		}
	}
}

func list(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// The series puts each record in the bucket its interval ended in, a record outside the
// window (a replica's clock off) in the nearest, and keeps one line per provider.
func TestSeriesBuckets(t *testing.T) {
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pts := []recordPoint{
		{to: from.Add(30 * time.Second), leases: map[string]int{"local": 2}, blocked: map[string]int{"local": 1}},
		{to: from.Add(5*time.Minute + time.Second), leases: map[string]int{"local": 1, "kvm": 4}, blocked: map[string]int{}},
		{to: from.Add(-time.Minute), leases: map[string]int{"kvm": 1}, blocked: map[string]int{"kvm": 1}},
		{to: from.Add(11 * time.Minute), leases: map[string]int{"local": 7}, blocked: map[string]int{}},
	}
	s := series(pts, from, 10*time.Minute, 2*time.Minute)
	if s.StepSeconds != 120 || len(s.Starts) != 5 || !s.Starts[4].Equal(from.Add(8*time.Minute)) {
		t.Fatalf("step %d, starts %v", s.StepSeconds, s.Starts)
	}
	got := ""
	for _, p := range s.Providers {
		got += fmt.Sprint(p.Provider, " ", p.Leases, " / ", p.Blocked, "\n")
	}
	want := "kvm [1 0 4 0 0] / [1 0 0 0 0]\nlocal [2 0 1 0 7] / [1 0 0 0 0]\n"
	if got != want {
		t.Errorf("series:\n%swant\n%s", got, want)
	}
}

// No input panics, and every accepted query is within its bounds.
func FuzzParseStatsQuery(f *testing.F) {
	f.Add("1h", "target", "rate", "20", "1m", "a.example,b")
	f.Add("7d", "pool", "blocked", "0", "", "")
	f.Add("-5d", "x", "", "99999999999999999999", "0s", ",,,")
	f.Fuzz(func(t *testing.T, since, by, sort, top, step, list string) {
		q, err := ParseStatsQuery(StatsInput{Since: since, By: by, Sort: sort, Top: top, Step: step, Targets: []string{list}})
		if err != nil {
			return
		}
		if q.Since <= 0 || q.Since > maxStatsWindow || q.Top < 0 || q.Top > maxTop || (q.Step != 0 && (q.Step < time.Second || q.Step > q.Since)) {
			t.Errorf("out of bounds: %+v", q)
		}
	})
}

// Before `egressd setup` (no EGRESS_LEASE_STATS yet) there are no statistics, not an error.
func TestLoadStatsBeforeSetup(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	st, err := LoadStats(t.Context(), js, StatsQuery{Since: time.Hour, By: StatsByTarget, Sort: SortByRate}, time.Now())
	if err != nil || st.Records != 0 || len(st.Rows) != 0 || len(st.Series.Starts) != 60 {
		t.Fatalf("%+v, %v", st, err)
	}
}
