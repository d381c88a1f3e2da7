package events

import "time"

// LeaseKeysPrefix starts the egress_locks keys where each provider's provisioner says which
// lease masters the keys of its proxies derive from, lease-keys.<provider>: what a master
// rotation waits for before new tokens are signed with the new master (decision 88). A
// provider that cannot deliver keys to running proxies writes none.
const LeaseKeysPrefix = "lease-keys."

// LeaseKeysKey is provider's lease keys report key.
func LeaseKeysKey(provider string) string { return LeaseKeysPrefix + provider }

// LeaseKeysReport is the value of a lease keys key. It names master IDs (digests), never a
// key or a master.
type LeaseKeysReport struct {
	V        int       `json:"v"`
	Provider string    `json:"provider"`
	Worker   string    `json:"worker,omitempty"`
	At       time.Time `json:"at"`
	// Phase and Masters are the rotation as the provisioner sees it: the phase (steady,
	// spreading, retiring) and the IDs of the masters it delivers, the signing one first.
	Phase   string           `json:"phase"`
	Masters []string         `json:"masters"`
	Proxies []ProxyLeaseKeys `json:"proxies"`
}

// Holding counts, for each master, the instances whose keys derive from it.
func (r LeaseKeysReport) Holding() map[string]int {
	n := map[string]int{}
	for _, p := range r.Proxies {
		for _, id := range p.KeyIDs {
			n[id]++
		}
	}
	return n
}

// ProxyLeaseKeys is what one lease-mode instance holds.
type ProxyLeaseKeys struct {
	Proxy string `json:"proxy"`
	// Generation is the instance's (ProxyStatus.Generation): a report of another generation
	// says nothing of the proxy's current instance.
	Generation string   `json:"generation"`
	Instance   string   `json:"instance"` // the provider's instance name
	KeyIDs     []string `json:"keyIds"`   // the masters its keys derive from
}

// Reasons of lease master events (KindLeaseMaster, subject token "installation"): the phases
// of a rotation.
const (
	ReasonRotationBegun Reason = "RotationBegun" // a next master spreads to the proxies
	ReasonKeySwitched   Reason = "KeySwitched"   // new tokens are signed with the new master
	ReasonKeyRetired    Reason = "KeyRetired"    // the previous master's tokens are refused
)
