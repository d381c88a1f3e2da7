package events

import "time"

// LockRecord is the value of a lock key in egress_locks: the reconciler's leader lease, an
// op lock, a round's GC or check lock. The key's TTL is the lock's; its revision is the
// fencing token. Purpose is for people reading the bucket (leader, the op kind, gc, check).
type LockRecord struct {
	V        int       `json:"v"`
	Holder   string    `json:"holder"`
	Purpose  string    `json:"purpose,omitempty"`
	Acquired time.Time `json:"acquired"`
}
