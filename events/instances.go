package events

import "time"

// A proxy of its own is rolled successor first (decision 98): beside the instance its status
// describes, it may have a successor being built and retiring predecessors that serve the
// leases granted on them until those end. Every instance is recorded here before its create
// is sent, and stays recorded until a delete confirms it gone, so a kill -9 anywhere leaves
// none unrecorded: the orphan collector, the instance limits and the leasers read them from
// the status, and nobody else needs to know them.

// InstanceRef is an instance of a proxy other than the one its status describes.
type InstanceRef struct {
	Name string `json:"name"`
	ID   string `json:"id,omitempty"` // empty until the provider reported it
	Host string `json:"host,omitempty"`
	// Generation names it in lease tokens and derives its key (ProxyStatus.Generation).
	Generation string `json:"generation,omitempty"`
	// ProvisionAt is when its create began; with ID, it is what leases granted on it record
	// (ProxyStatus.Incarnation).
	ProvisionAt time.Time `json:"provisionAt,omitzero"`
	// What a successor is built from, so that the switch gives the status the hashes of the
	// instance it then describes, and a successor outdated before its switch is retired.
	SpecHash     string `json:"specHash,omitempty"`
	AuthHash     string `json:"authHash,omitempty"`
	AuthRevision uint64 `json:"authRevision,omitempty"`
	// NextPollAt is when a successor not yet Running is read again.
	NextPollAt time.Time `json:"nextPollAt,omitzero"`
	// RetiredAt is when a retiring instance left the status (its leases are counted from a
	// little after, so a grant racing the switch is counted).
	RetiredAt time.Time `json:"retiredAt,omitzero"`
}

// Incarnation is what a lease granted on the instance records (ProxyStatus.Incarnation).
func (r InstanceRef) Incarnation() string {
	return r.ID + "@" + r.ProvisionAt.UTC().Format(time.RFC3339Nano)
}

// InstanceNames are the names of every instance of the proxy that may exist: its own, its
// successor's and its retiring predecessors'. The orphan collector keeps their leftovers.
func (s ProxyStatus) InstanceNames() []string {
	var out []string
	if s.InstanceName != "" && s.MayExist() {
		out = append(out, s.InstanceName)
	}
	if s.Successor != nil {
		out = append(out, s.Successor.Name)
	}
	for _, r := range s.Retiring {
		out = append(out, r.Name)
	}
	return out
}

// ExtraHosts are the hosts of the instances the proxy may have besides the one its status
// describes (its successor and retiring predecessors), one per instance: the instance limits
// count them.
func (s ProxyStatus) ExtraHosts() []string {
	var hosts []string
	if s.Successor != nil {
		hosts = append(hosts, s.Successor.Host)
	}
	for _, r := range s.Retiring {
		hosts = append(hosts, r.Host)
	}
	return hosts
}
