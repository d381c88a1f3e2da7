package leaser

import (
	"testing"

	"github.com/egressd/egressd/events"
)

// A slot goes only on positive evidence: a view that lags behind the grant, in either
// bucket, keeps it.
func TestLeaseStaleEnd(t *testing.T) {
	lease := events.Lease{SpecRevision: 10, StatusRevision: 20, Instance: "i@1"}
	for _, tc := range []struct {
		name     string
		specHigh uint64
		p        proxyView
		lease    events.Lease
		want     events.Reason
	}{
		{"current", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 20, instance: "i@1"}, lease, ""},
		{"spec updated, same instance", 30, proxyView{specRev: 25, hasStatus: true, statusRev: 28, instance: "i@1"}, lease, ""},
		{"spec deleted", 30, proxyView{specRev: 25, specGone: true, hasStatus: true, statusRev: 20, instance: "i@1"}, lease, events.ReasonProxyDeleted},
		{"spec absent, read past the grant", 30, proxyView{}, lease, events.ReasonProxyDeleted},
		{"spec not read up to the grant yet", 9, proxyView{}, lease, ""},
		{"another instance", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 25, instance: "i@2"}, lease, events.ReasonProxyReplaced},
		{"no instance any more", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 25}, lease, events.ReasonProxyReplaced},
		{"the instance must go", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 25, instance: "i@1", teardown: events.ReasonSpecChanged}, lease, events.ReasonProxyReplaced},
		// A pool deleting its member: the status says so before the spec's deletion arrives.
		{"the instance must go, its proxy deleted", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 25, instance: "i@1", teardown: events.ReasonProxyDeleted}, lease, events.ReasonProxyDeleted},
		{"status older than the grant", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 15, instance: "i@0"}, lease, ""},
		{"a lease from before the records", 30, proxyView{specRev: 10, hasStatus: true, statusRev: 25, instance: "i@2"}, events.Lease{}, ""},
		{"a lease from before the records, proxy deleted", 30, proxyView{specRev: 25, specGone: true}, events.Lease{}, events.ReasonProxyDeleted},
	} {
		v := newView()
		v.specHigh = tc.specHigh
		if got := v.staleEnd(&tc.p, tc.lease); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A grant given up on that is committed after all is queued for removal, without a reason
// (it never carried a grant), and only once the watch brings it.
func TestLeaseAbandonedGrantIsGivenBack(t *testing.T) {
	v := newView()
	v.sweeping = true
	v.abandon("tok")
	v.noteLease("px.0", 7, events.Lease{Proxy: "px", Token: "tok", SpecRevision: 1})
	v.noteLease("px.1", 8, events.Lease{Proxy: "px", Slot: 1, Token: "other", SpecRevision: 1})
	got := v.takeRemovals()
	if len(got) != 1 || got["px.0"].rev != 7 || got["px.0"].end != "" {
		t.Fatalf("removals %+v", got)
	}
}
