package prober

import (
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
)

// views returns each member's view of the same set of probers.
func views(recs []events.ProberMember) []members {
	out := make([]members, len(recs))
	for i, self := range recs {
		m := members{self: self, others: map[string]events.ProberMember{}}
		for j, o := range recs {
			if j != i {
				m.others[o.ID] = o
			}
		}
		out[i] = m
	}
	return out
}

// Every proxy has exactly one owner, computed alike by every prober, among those whose
// filters take it; shares are about even; a new prober takes only its own share.
func TestOwnership(t *testing.T) {
	recs := []events.ProberMember{
		{ID: "a1"}, {ID: "b2"}, {ID: "c3"},
		{ID: "kvm", Filters: []string{"kvm-home"}},
		{ID: "gcp-eu", Filters: []string{"gcp.europe-west1-b"}},
	}
	const n = 9000
	type proxy struct{ name, provider, host string }
	var proxies []proxy
	for i := range n {
		p := proxy{fmt.Sprintf("p%d", i), "local", "local"}
		switch i % 3 {
		case 1:
			p.provider, p.host = "kvm-home", "h1"
		case 2:
			p.provider, p.host = "gcp", "europe-west1-b"
		}
		proxies = append(proxies, p)
	}
	owners := func(vs []members) map[string]string {
		out := map[string]string{}
		for _, p := range proxies {
			for _, v := range vs {
				if !takes(v.self.Filters, p.provider, p.host) || !v.owns(p.name, p.provider, p.host) {
					continue
				}
				if prev, dup := out[p.name]; dup {
					t.Fatalf("%s owned by %s and %s", p.name, prev, v.self.ID)
				}
				out[p.name] = v.self.ID
			}
			if out[p.name] == "" {
				t.Fatalf("%s has no owner", p.name)
			}
		}
		return out
	}
	before := owners(views(recs))
	share := map[string]int{}
	for _, id := range before {
		share[id]++
	}
	// local: 3 unfiltered probers of 3000; kvm-home: 4 (3 unfiltered + kvm); gcp: 4.
	if share["a1"] < 1500 || share["kvm"] < 500 || share["kvm"] > 1000 || share["gcp-eu"] < 500 || share["gcp-eu"] > 1000 {
		t.Errorf("shares %v", share)
	}
	for name, id := range before {
		i := 0
		fmt.Sscanf(name, "p%d", &i)
		if (id == "kvm" && i%3 != 1) || (id == "gcp-eu" && i%3 != 2) {
			t.Errorf("%s went to %s, whose filters do not take it", name, id)
		}
	}

	after := owners(views(append(recs, events.ProberMember{ID: "d4"})))
	moved := 0
	for name, id := range after {
		if id != before[name] {
			moved++
			if id != "d4" {
				t.Errorf("%s moved from %s to %s, not to the new prober", name, before[name], id)
			}
		}
	}
	if moved < n/8 || moved > n/3 {
		t.Errorf("%d of %d proxies moved to the new prober", moved, n)
	}
}

func TestTakes(t *testing.T) {
	for _, tc := range []struct {
		filters        []string
		provider, host string
		want           bool
	}{
		{nil, "local", "local", true},
		{[]string{"local"}, "local", "h9", true},
		{[]string{"kvm.h1"}, "kvm", "h1", true},
		{[]string{"kvm.h1"}, "kvm", "h2", false},
		{[]string{"kvm.h1", "gcp"}, "gcp", "z", true},
		{[]string{"gcp"}, "external", "external", false},
		{[]string{"external"}, "external", "external", true},
	} {
		if got := takes(tc.filters, tc.provider, tc.host); got != tc.want {
			t.Errorf("takes(%v, %s, %s) = %v", tc.filters, tc.provider, tc.host, got)
		}
	}
}
