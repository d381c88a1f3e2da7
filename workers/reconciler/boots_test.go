package reconciler

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// A boot is reported once: at the decision that first stamps readyAt, with the target the
// proxy landed on (else its spec's zone) and its image.
func TestFirstReady(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	spec := &schemas.ProxySpec{Provider: "gcp", Placement: schemas.Placement{Zone: "europe-west1-b", Image: "debian-13"}}
	ready := &events.ProxyStatus{Provider: "gcp", Host: "europe-west1-b", CreatedAt: t0, ReadyAt: t0.Add(42 * time.Second)}
	for _, tc := range []struct {
		name string
		in   Input
		st   *events.ProxyStatus
		want *bootSeen
	}{
		{name: "first Ready", in: Input{Spec: spec, Status: &events.ProxyStatus{CreatedAt: t0}}, st: ready,
			want: &bootSeen{provider: "gcp", zone: "europe-west1-b", image: "debian-13", took: 42 * time.Second}},
		{name: "first decision already Ready", in: Input{Spec: spec}, st: ready,
			want: &bootSeen{provider: "gcp", zone: "europe-west1-b", image: "debian-13", took: 42 * time.Second}},
		{name: "zone from the spec", in: Input{Spec: spec}, st: &events.ProxyStatus{Provider: "gcp", CreatedAt: t0, ReadyAt: t0.Add(time.Second)},
			want: &bootSeen{provider: "gcp", zone: "europe-west1-b", image: "debian-13", took: time.Second}},
		{name: "Ready before", in: Input{Spec: spec, Status: ready}, st: ready},
		{name: "not Ready", in: Input{Spec: spec}, st: &events.ProxyStatus{CreatedAt: t0}},
		{name: "deleted", in: Input{Status: &events.ProxyStatus{CreatedAt: t0}}, st: nil},
		{name: "clock behind", in: Input{Spec: spec}, st: &events.ProxyStatus{Provider: "gcp", Host: "h", CreatedAt: t0, ReadyAt: t0.Add(-time.Second)},
			want: &bootSeen{provider: "gcp", zone: "h", image: "debian-13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firstReady(tc.in, tc.st)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
