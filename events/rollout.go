package events

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rollouts (docs/rollouts.md, decision 86): a change that needs a new instance (the spec, the
// cloud_init document it references, credentials its provider cannot update in place) is
// not carried out on every proxy at once. A pool member waits for its pool to rotate it,
// successor first; a proxy of its own waits for its provider's rollout budget
// (maxUnavailable), then is rolled successor first too (decision 98): a successor is built
// beside its instance, the status switches to it, and the instance it replaced retires once
// the leases granted on it end.

// Reasons of rollouts.
const (
	// ReasonCredentialsChanged: the spec's auth changed and the instance's provider cannot
	// update credentials in place, so a new instance brings them (an outdated reason; a
	// teardown reason).
	ReasonCredentialsChanged Reason = "CredentialsChanged"
	// ReasonRolloutWaiting: the proxy's instance is outdated and waits for room in its
	// rollout budget (or its pool's rotation); it serves meanwhile.
	ReasonRolloutWaiting Reason = "RolloutWaiting"
	// ReasonRolloutPaused: the rollout its provider's proxies are in is paused.
	ReasonRolloutPaused Reason = "RolloutPaused"
	// ReasonRolloutDraining: the proxy took a place in its rollout budget; it is no longer
	// leased and is replaced once its leases end. Written by releases before decision 98
	// only: a status that still says it is rolled successor first.
	ReasonRolloutDraining Reason = "RolloutDraining"
	// ReasonRolloutSurging: the proxy took a place in its rollout budget; a successor is
	// being built beside its instance, which serves meanwhile (decision 98).
	ReasonRolloutSurging Reason = "RolloutSurging"
	// ReasonRolloutRetiring: the proxy serves on its successor; the instance it replaced
	// serves the leases granted on it until they end, then is deleted.
	ReasonRolloutRetiring Reason = "RolloutRetiring"
	// ReasonRolloutReplaced: the proxy is Ready on a new instance; its place in the budget is
	// free (an event reason).
	ReasonRolloutReplaced Reason = "RolloutReplaced"
)

// RolloutStage is where an outdated proxy is in its rollout.
type RolloutStage string

// Rollout stages. Waiting and Paused take no place in a budget; the others do. A proxy of
// its own goes Waiting → Surging → Retiring (decision 98); Draining and Replacing are the
// drain-first stages of releases before it, still finished when a status has them.
const (
	RolloutWaiting   RolloutStage = "Waiting"   // serving; waits for room (or its pool)
	RolloutPaused    RolloutStage = "Paused"    // serving; its rollout is paused
	RolloutSurging   RolloutStage = "Surging"   // serving; its successor is being built
	RolloutRetiring  RolloutStage = "Retiring"  // on its successor; the old instance serves its leases
	RolloutDraining  RolloutStage = "Draining"  // no new leases; its leases run on
	RolloutReplacing RolloutStage = "Replacing" // its instance is being replaced
)

// Rollout is, on a proxy whose instance must be replaced for a change, why and how far.
// It never holds what changed, only that it did: no credential or document reaches a
// status.
type Rollout struct {
	Reason Reason       `json:"reason"` // SpecChanged (the spec or its document) or CredentialsChanged
	Stage  RolloutStage `json:"stage"`
	// Scope is the budget it counts against: "provider <name>", or "pool <name>" for a member
	// (its pool's rotation is its budget).
	Scope string    `json:"scope"`
	Since time.Time `json:"since"` // when the change was seen
	// StartedAt is when it took a place in the budget; zero while waiting.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// SwitchedAt is when the status switched to the successor; zero before.
	SwitchedAt time.Time `json:"switchedAt,omitzero"`
}

// Counts reports whether r takes a place in its budget: any stage past waiting.
func (r *Rollout) Counts() bool {
	return r != nil && r.Stage != RolloutWaiting && r.Stage != RolloutPaused
}

// ProviderScope is the rollout scope of provider's proxies of their own.
func ProviderScope(provider string) string { return "provider " + provider }

// PoolScope is the rollout scope of pool's members.
func PoolScope(pool string) string { return "pool " + pool }

// RolloutProgress is one scope's rollout as its proxies' statuses tell it: how many are
// outdated and where they are.
type RolloutProgress struct {
	Scope     string `json:"scope"`
	Total     int    `json:"total"`     // proxies in the scope
	Outdated  int    `json:"outdated"`  // of them, still on an outdated instance
	Waiting   int    `json:"waiting"`   // outdated, not yet started
	Paused    bool   `json:"paused"`    // its rollout is paused
	Draining  int    `json:"draining"`  // draining by their leases (a proxy of its own: its retiring instance)
	Replacing int    `json:"replacing"` // being replaced (a proxy of its own: its successor being built)
}

// Replaced is how many proxies of the scope are no longer outdated.
func (p RolloutProgress) Replaced() int { return p.Total - p.Outdated }

// String says it for humans: "12/40 replaced, 3 draining, 1 replacing, 24 waiting".
func (p RolloutProgress) String() string {
	s := fmt.Sprintf("%d/%d replaced, %d draining, %d replacing, %d waiting", p.Replaced(), p.Total, p.Draining, p.Replacing, p.Waiting)
	if p.Paused {
		s += " (paused)"
	}
	return s
}

// Add counts st, a status in p's scope.
func (p *RolloutProgress) Add(st ProxyStatus) {
	p.Total++
	r := st.Rollout
	if r == nil {
		return
	}
	p.Outdated++
	switch r.Stage {
	case RolloutDraining, RolloutRetiring:
		p.Draining++
	case RolloutReplacing, RolloutSurging:
		p.Replacing++
	case RolloutPaused:
		p.Waiting++
		p.Paused = true
	default:
		p.Waiting++
	}
}

// RolloutPause is the value of the key events.RolloutPauseKey in egress_locks: the rollout
// scopes that are paused ("provider local", "pool web", or "*" for every one), each with when
// and by whom. A paused scope starts no new replacement; one already started finishes.
type RolloutPause struct {
	V      int                    `json:"v"`
	Scopes map[string]PausedScope `json:"scopes"`
}

// PausedScope is one paused scope.
type PausedScope struct {
	At   time.Time `json:"at"`
	By   string    `json:"by,omitempty"`
	Note string    `json:"note,omitempty"`
}

// RolloutPauseKey is the key of the rollout pauses in egress_locks.
const RolloutPauseKey = "rollout-pause"

// Paused reports whether scope is paused.
func (p RolloutPause) Paused(scope string) bool {
	_, one := p.Scopes[scope]
	_, all := p.Scopes["*"]
	return one || all
}

// RolloutsOf is the progress of every rollout under way in statuses (a scope with an outdated
// proxy), sorted by scope. A scope counts every proxy in it: a pool's members, or a
// provider's proxies of their own.
func RolloutsOf(statuses []ProxyStatus) []RolloutProgress {
	by := map[string]*RolloutProgress{}
	scopeOf := func(st ProxyStatus) string {
		switch {
		case st.Rollout != nil:
			return st.Rollout.Scope
		case st.Pool != "":
			return PoolScope(st.Pool)
		case st.Provider != "":
			return ProviderScope(st.Provider)
		}
		return ""
	}
	for _, st := range statuses {
		s := scopeOf(st)
		if s == "" {
			continue
		}
		p := by[s]
		if p == nil {
			p = &RolloutProgress{Scope: s}
			by[s] = p
		}
		p.Add(st)
	}
	out := []RolloutProgress{}
	for _, p := range by {
		if p.Outdated > 0 {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b RolloutProgress) int { return strings.Compare(a.Scope, b.Scope) })
	return out
}
