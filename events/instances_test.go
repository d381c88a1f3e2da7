package events

import (
	"slices"
	"testing"
	"time"
)

// The instances a status says may exist, which the collector, the limits and the leasers
// read (decision 98).
func TestStatusInstances(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	old := InstanceRef{Name: "egress-old", ID: "local/egress-old", Host: "h1", ProvisionAt: at.Add(-time.Hour)}
	for _, tc := range []struct {
		name  string
		st    ProxyStatus
		names []string
		hosts []string
	}{
		{"none yet", ProxyStatus{InstanceName: "egress-a"}, nil, nil},
		{"its own", ProxyStatus{InstanceName: "egress-a", InstanceID: "local/egress-a"}, []string{"egress-a"}, nil},
		{"a create sent", ProxyStatus{InstanceName: "egress-a", ProvisionAt: at}, []string{"egress-a"}, nil},
		{"rolled successor first", ProxyStatus{InstanceName: "egress-a", InstanceID: "local/egress-a", Host: "h2",
			Successor: &InstanceRef{Name: "egress-b", Host: "h2"}, Retiring: []InstanceRef{old}},
			[]string{"egress-a", "egress-b", "egress-old"}, []string{"h2", "h1"}},
		{"its own deleted, one retiring", ProxyStatus{InstanceName: "egress-a", Retiring: []InstanceRef{old}}, []string{"egress-old"}, []string{"h1"}},
	} {
		if got := tc.st.InstanceNames(); !slices.Equal(got, tc.names) {
			t.Errorf("%s: InstanceNames %v, want %v", tc.name, got, tc.names)
		}
		if got := tc.st.ExtraHosts(); !slices.Equal(got, tc.hosts) {
			t.Errorf("%s: ExtraHosts %v, want %v", tc.name, got, tc.hosts)
		}
	}
	// A lease granted on the instance recorded its incarnation while the status described it.
	if got, want := old.Incarnation(), (ProxyStatus{InstanceID: old.ID, ProvisionAt: old.ProvisionAt}).Incarnation(); got != want {
		t.Errorf("a retiring instance's incarnation %q, want what its leases recorded, %q", got, want)
	}
}
