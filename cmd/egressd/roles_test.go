package main

import (
	"slices"
	"strings"
	"testing"
)

// The daemon's table starts every role after those it names, and a table naming an unknown
// role, a role twice or a cycle is refused before anything starts.
func TestRoleTableStartsInDependencyOrder(t *testing.T) {
	order, err := startOrder(roleTable)
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != len(roleTable) {
		t.Fatalf("startOrder kept %d of %d roles", len(order), len(roleTable))
	}
	at := map[string]int{}
	for i, r := range order {
		at[r.name] = i
	}
	for _, r := range order {
		for _, a := range r.after {
			if at[a] >= at[r.name] {
				t.Errorf("%s starts before %s, which it must follow", r.name, a)
			}
		}
	}
	// The orders the start has always kept (run.go's comments before the table).
	for _, pair := range [][2]string{{"provisioner", "reconciler"}, {"leaser", "reload"}, {"echo", "prober"}, {"health", "metrics"}} {
		if at[pair[0]] >= at[pair[1]] {
			t.Errorf("%s must start before %s: order %v", pair[0], pair[1], names(order))
		}
	}
	none := func(*daemon) bool { return false }
	for _, bad := range []struct {
		table []role
		want  string
	}{
		{[]role{{name: "a", wanted: none, after: []string{"b"}}}, `a starts after "b", which is no role`},
		{[]role{{name: "a", wanted: none}, {name: "a", wanted: none}}, "a is listed twice"},
		{[]role{{name: "a", wanted: none, after: []string{"b"}}, {name: "b", wanted: none, after: []string{"a"}}}, "depends on itself"},
	} {
		if _, err := startOrder(bad.table); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("startOrder(%v) = %v, want %q", names(bad.table), err, bad.want)
		}
	}
	// A later entry a role names comes first; otherwise the table's order holds.
	got, err := startOrder([]role{{name: "b", after: []string{"c"}}, {name: "a"}, {name: "c"}})
	if err != nil || !slices.Equal(names(got), []string{"c", "b", "a"}) {
		t.Errorf("startOrder = %v, %v; want [c b a]", names(got), err)
	}
}

func names(rs []role) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}
