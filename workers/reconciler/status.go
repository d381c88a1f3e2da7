package reconciler

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
)

func cloneStatus(s events.ProxyStatus) events.ProxyStatus {
	if s.Op != nil {
		op := *s.Op
		s.Op = &op
	}
	if s.LastError != nil {
		le := *s.LastError
		s.LastError = &le
	}
	if s.Successor != nil {
		succ := *s.Successor
		s.Successor = &succ
	}
	s.Retiring = slices.Clone(s.Retiring)
	return s
}

// sameStatus compares two statuses ignoring UpdatedAt, so an unchanged decision writes nothing.
func sameStatus(a, b events.ProxyStatus) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// rendezvous picks the host with the highest hash of (key, host): stable for a key, and
// adding or removing a host moves only the keys that must move.
func rendezvous(key string, hosts []string) string {
	var best string
	var bestScore uint64
	for _, h := range hosts {
		f := fnv.New64a()
		f.Write([]byte(key + "\x00" + h))
		if s := f.Sum64(); best == "" || s > bestScore {
			best, bestScore = h, s
		}
	}
	return best
}
