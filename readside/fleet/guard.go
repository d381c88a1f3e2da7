package fleet

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// ProviderGuard is one provider's guard rails as `egressd status providers`, the status page
// and /api/status.json show them: its instances against its limits, its creates in the last
// minute against its rate, the proxies each rail holds back, and each target's check,
// instances and brake. Counted from proxy_status as the reconciler counts (docs/operations.md).
type ProviderGuard struct {
	Provider string `json:"provider"`
	// Instances are the proxies whose status says an instance may exist (one was reported,
	// or a create was sent); MaxInstances its maxInstances (0: none).
	Instances    int `json:"instances"`
	MaxInstances int `json:"maxInstances,omitempty"`
	// CreatesLastMinute are the creates begun within the last minute (the statuses' create
	// times: a create retried since counts once); MaxCreatesPerMinute its rate (0: none).
	CreatesLastMinute   int                   `json:"createsLastMinute"`
	MaxCreatesPerMinute int                   `json:"maxCreatesPerMinute,omitempty"`
	Waiting             map[events.Reason]int `json:"waiting,omitempty"` // proxies held back, by reason
	Targets             []TargetGuard         `json:"targets"`
}

// TargetGuard is one provider target: its latest check (nil: none yet), its instances against
// maxInstancesPerTarget, and the brake when it holds (Suspect).
type TargetGuard struct {
	Target       string               `json:"target"`
	Check        *events.TargetHealth `json:"check,omitempty"`
	Instances    int                  `json:"instances"`
	MaxInstances int                  `json:"maxInstances,omitempty"`
	Suspect      *events.Suspect      `json:"suspect,omitempty"`
}

// HeldBackReasons are the reasons a guard rail holds a create back.
var HeldBackReasons = []events.Reason{events.ReasonLimitReached, events.ReasonRateLimited, events.ReasonProviderUnhealthy}

// HeldBack says whether reason is a guard rail holding a create back.
func HeldBack(reason events.Reason) bool { return slices.Contains(HeldBackReasons, reason) }

// Catalogs reads provider_catalog: every provider's record, by name. A nil bucket reads as none.
func Catalogs(ctx context.Context, kv jetstream.KeyValue) ([]events.CatalogRecord, error) {
	return records(ctx, kv, func(a, b events.CatalogRecord) int { return strings.Compare(a.Provider, b.Provider) })
}

// SuspectPools are the pools the brake holds, from their Unhealthy members' statuses.
func SuspectPools(rows []Row) map[string]events.Suspect {
	out := map[string]events.Suspect{}
	for i := range rows {
		if st := rows[i].Status; st != nil && st.Phase == events.PhaseUnhealthy && st.Suspect.Scope == events.SuspectPool {
			if _, ok := out[st.Suspect.Name]; !ok {
				out[st.Suspect.Name] = st.Suspect
			}
		}
	}
	return out
}

// Guards builds the providers' guard rails from the fleet's rows, the providers' catalog
// records and the targets' checks: every provider any of them names, by name, each target
// (from the catalog, the checks and the statuses) by name.
func Guards(rows []Row, catalogs []events.CatalogRecord, checks []events.TargetHealth, now time.Time) []ProviderGuard {
	by := map[string]*ProviderGuard{}
	targets := map[[2]string]*TargetGuard{}
	provider := func(name string) *ProviderGuard {
		if by[name] == nil {
			by[name] = &ProviderGuard{Provider: name, Waiting: map[events.Reason]int{}}
		}
		return by[name]
	}
	target := func(p, t string) *TargetGuard {
		provider(p)
		k := [2]string{p, t}
		if targets[k] == nil {
			targets[k] = &TargetGuard{Target: t}
		}
		return targets[k]
	}
	perTarget := map[string]int{}
	for _, c := range catalogs {
		g := provider(c.Provider)
		g.MaxInstances, g.MaxCreatesPerMinute = c.Limits[events.LimitMaxInstances], c.Limits[events.LimitCreatesPerMinute]
		perTarget[c.Provider] = c.Limits[events.LimitMaxPerTarget]
		for _, h := range c.Hosts {
			target(c.Provider, h.Name)
		}
	}
	for i := range checks {
		target(checks[i].Provider, checks[i].Target).Check = &checks[i]
	}
	for i := range rows {
		countRow(&rows[i], provider, target, now)
	}
	out := make([]ProviderGuard, 0, len(by))
	for k, t := range targets {
		t.MaxInstances = perTarget[k[0]]
		by[k[0]].Targets = append(by[k[0]].Targets, *t)
	}
	for _, g := range by {
		slices.SortFunc(g.Targets, func(a, b TargetGuard) int {
			return cmp.Or(cmp.Compare(a.order(), b.order()), strings.Compare(a.Target, b.Target))
		})
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b ProviderGuard) int { return cmp.Compare(a.Provider, b.Provider) })
	return out
}

// order is the target's place in its provider's config, as its check says; unchecked last.
func (t TargetGuard) order() int {
	if t.Check == nil {
		return math.MaxInt
	}
	return t.Check.Order
}

// countRow adds one proxy to its provider's and target's counts.
func countRow(r *Row, provider func(string) *ProviderGuard, target func(p, t string) *TargetGuard, now time.Time) {
	st := r.Status
	if st == nil || st.Mode == schemas.ModeExternal || st.Provider == "" {
		return
	}
	g := provider(st.Provider)
	if HeldBack(st.Reason) {
		g.Waiting[st.Reason]++
	}
	if !st.ProvisionAt.IsZero() && now.Sub(st.ProvisionAt) < time.Minute {
		g.CreatesLastMinute++
	}
	if !st.MayExist() {
		return
	}
	g.Instances++
	t := target(st.Provider, st.Host)
	t.Instances++
	if s := st.Suspect; s.Scope == events.SuspectTarget && st.Phase == events.PhaseUnhealthy && t.Suspect == nil {
		t.Suspect = &s
	}
}
