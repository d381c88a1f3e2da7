package leaser

import (
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// A slot goes only on positive evidence: a view that lags behind the grant, in either
// bucket, keeps it.
func TestLeaseStaleEnd(t *testing.T) {
	lease := events.Lease{SpecRevision: 10, StatusRevision: 20, Instance: "i@1"}
	for _, tc := range []struct {
		name     string
		specHigh uint64
		h        selection.Heard
		lease    events.Lease
		want     events.Reason
	}{
		{"current", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 20, Instance: "i@1"}, lease, ""},
		{"spec updated, same instance", 30, selection.Heard{SpecRev: 25, HasStatus: true, StatusRev: 28, Instance: "i@1"}, lease, ""},
		{"spec deleted", 30, selection.Heard{SpecRev: 25, SpecGone: true, HasStatus: true, StatusRev: 20, Instance: "i@1"}, lease, events.ReasonProxyDeleted},
		{"spec absent, read past the grant", 30, selection.Heard{}, lease, events.ReasonProxyDeleted},
		{"spec not read up to the grant yet", 9, selection.Heard{}, lease, ""},
		{"another instance", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@2"}, lease, events.ReasonProxyReplaced},
		{"no instance any more", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25}, lease, events.ReasonProxyReplaced},
		{"the instance must go", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@1", Teardown: events.ReasonSpecChanged}, lease, events.ReasonProxyReplaced},
		// A pool deleting its member: the status says so before the spec's deletion arrives.
		{"the instance must go, its proxy deleted", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@1", Teardown: events.ReasonProxyDeleted}, lease, events.ReasonProxyDeleted},
		// Rolled successor first (decision 98): the instance retires and serves its leases on.
		{"its instance retires", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@2", Retiring: []string{"i@1"}}, lease, ""},
		{"its instance retires, the new one must go", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@2", Teardown: events.ReasonSpecChanged, Retiring: []string{"i@1"}}, lease, ""},
		{"its instance retired and was deleted", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 27, Instance: "i@2", Retiring: []string{"i@0"}}, lease, events.ReasonProxyReplaced},
		{"its instance retires, its proxy deleted", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@2", Teardown: events.ReasonProxyDeleted, Retiring: []string{"i@1"}}, lease, events.ReasonProxyDeleted},
		{"status older than the grant", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 15, Instance: "i@0"}, lease, ""},
		{"a lease from before the records", 30, selection.Heard{SpecRev: 10, HasStatus: true, StatusRev: 25, Instance: "i@2"}, events.Lease{}, ""},
		{"a lease from before the records, proxy deleted", 30, selection.Heard{SpecRev: 25, SpecGone: true}, events.Lease{}, events.ReasonProxyDeleted},
	} {
		v := newView(0)
		v.specHigh = tc.specHigh
		if got := v.staleEnd(tc.h, tc.lease); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A grant given up on that is committed after all is queued for removal, without a reason
// (it never carried a grant), and only once the watch brings it.
func TestLeaseAbandonedGrantIsGivenBack(t *testing.T) {
	v := newView(0)
	v.sweeping = true
	v.abandon("tok")
	v.noteLease("px.0", 7, events.Lease{Proxy: "px", Token: "tok", SpecRevision: 1})
	v.noteLease("px.1", 8, events.Lease{Proxy: "px", Slot: 1, Token: "other", SpecRevision: 1})
	got := v.takeRemovals()
	if len(got) != 1 || got["px.0"].rev != 7 || got["px.0"].end != "" {
		t.Fatalf("removals %+v", got)
	}
}
