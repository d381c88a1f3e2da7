package events

import "time"

// RevokedPrefix starts the lease_state keys of lease revocations, revoked.<lease ID>: a
// leaser writes one when a lease ends before its last token expires (released, reported and
// released, ended with its proxy), with a TTL that ends with the token, so the keys under it
// are the installation's revocation list, bounded by the leases ended within one maximum TTL.
// Whoever delivers the list to proxies (the provisioners for the local provider, `egressd
// lease-revocations` beside a stock Squid) watches them (docs/leases.md#revocation).
const RevokedPrefix = "revoked."

// RevocationKey is the lease_state key of lease id's revocation.
func RevocationKey(id string) string { return RevokedPrefix + id }

// LeaseRevocation is the value of a revocation key. It holds no token: the lease ID names
// every token of the lease.
type LeaseRevocation struct {
	V     int    `json:"v"`
	Lease string `json:"lease"`
	Proxy string `json:"proxy"`
	// Until is when the lease's last token stops passing anyway (its expiry plus the proxies'
	// clock skew allowance); the key's TTL ends then too.
	Until time.Time `json:"until"`
	// Why the lease ended: ReasonReleased, or the end of a lease whose proxy went
	// (ReasonProxyDeleted, ReasonProxyReplaced).
	Reason Reason `json:"reason"`
}
