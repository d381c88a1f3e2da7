package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// BucketPoolDemand holds the demand the leasers measure (issue 23 item 2): one record per
// leaser replica and scope, key <scope>.<leaser>, each written with a per-key TTL of a few
// publish intervals, so that a dead leaser's demand fades on its own. A scope is a pool name,
// or, for a selector that matches no pool, SelectorScope of it.
const BucketPoolDemand = "pool_demand"

// selectorScopePrefix starts the scope of a selector that matches no pool: pool names are
// DNS-1123 labels and never start with it.
const selectorScopePrefix = "_sel-"

// SelectorScope is the scope of demand for a selector that matches no pool: a short hash of
// the selector's pairs in key order, so that every replica keys it alike.
func SelectorScope(sel map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(sel[k]))
		h.Write([]byte{0})
	}
	return selectorScopePrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// IsSelectorScope tells a selector's scope from a pool's.
func IsSelectorScope(scope string) bool { return strings.HasPrefix(scope, selectorScopePrefix) }

// DemandKey is the key of leaser's record for scope.
func DemandKey(scope, leaser string) string { return scope + "." + leaser }

// DemandScopeOf is the scope of a key of pool_demand ("" if it is not one).
func DemandScopeOf(key string) string {
	scope, _, ok := strings.Cut(key, ".")
	if !ok {
		return ""
	}
	return scope
}

// PoolDemand is what one leaser replica measured of one scope over its window, which ends At.
// Held is the lease slots held on the scope's proxies as the replica's view has them (every
// replica sees every lease: readers take the largest, not the sum); the rest is this replica's
// own traffic (readers add them up).
type PoolDemand struct {
	V        int               `json:"v"`
	Leaser   string            `json:"leaser"`
	Pool     string            `json:"pool,omitempty"`     // the pool, for a pool's scope
	Selector map[string]string `json:"selector,omitempty"` // the selector, for a selector's scope
	// WindowSeconds is the sliding window Refused and Granted count over.
	WindowSeconds int `json:"windowSeconds"`
	Held          int `json:"held"`
	// Waiting is the acquires held waiting for a slot right now (acquires with waitSeconds).
	Waiting int `json:"waiting"`
	// Refused is the acquires refused for want of a free proxy in the window, a holder
	// counted once however often it retried.
	Refused int `json:"refused"`
	// Granted is the leases granted in the window; GrantsPerSecond is that over the window.
	Granted         int       `json:"granted"`
	GrantsPerSecond float64   `json:"grantsPerSecond"`
	At              time.Time `json:"at"`
}

// DemandSum adds the records of one scope: Held is the largest, the rest add up.
type DemandSum struct {
	Selector        map[string]string `json:"selector,omitempty"` // a selector's scope: the selector
	Held            int               `json:"held"`
	Waiting         int               `json:"waiting"`
	Refused         int               `json:"refused"`
	Granted         int               `json:"granted"`
	GrantsPerSecond float64           `json:"grantsPerSecond"`
	Leasers         int               `json:"leasers"` // records summed
}

// Add folds one leaser's record in.
func (s *DemandSum) Add(d PoolDemand) {
	if d.Selector != nil {
		s.Selector = d.Selector
	}
	s.Held = max(s.Held, d.Held)
	s.Waiting += d.Waiting
	s.Refused += d.Refused
	s.Granted += d.Granted
	s.GrantsPerSecond += d.GrantsPerSecond
	s.Leasers++
}

// String is the sum in one line: "6 waiting, 2 refused, 8 held, 1.5 grants/s (2 leasers)".
func (s DemandSum) String() string {
	return fmt.Sprintf("%d waiting, %d refused, %d held, %.3g grants/s (%d leasers)", s.Waiting, s.Refused, s.Held, s.GrantsPerSecond, s.Leasers)
}

// Unmet is the acquires that found no free proxy: waiting now, or refused in the window.
func (s DemandSum) Unmet() int { return s.Waiting + s.Refused }
