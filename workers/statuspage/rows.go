package statuspage

import (
	"cmp"
	"encoding/json"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// specFields is all the page keeps of a ProxySpec. The parsed spec, with its user-data and
// credentials, never leaves specView.
type specFields struct {
	mode, provider string
	maxLeases      int
	attributes     map[string]string
}

func specView(data []byte) (specFields, bool) {
	s, err := schemas.ParseProxySpec(data)
	if err != nil {
		// The reconciler records why in the proxy's status (phase Invalid); the parser's
		// error is not repeated here.
		return specFields{}, false
	}
	return specFields{mode: s.Mode, provider: s.Provider, maxLeases: *s.MaxLeases, attributes: maps.Clone(s.Attributes)}, true
}

// proxyRows joins specs, statuses, health and leases by proxy name, as `egressd status`
// does: a spec without a status yet is Pending; a status without a spec is a proxy being
// deleted.
func proxyRows(now time.Time, specs, statuses, health, leases map[string]jetstream.KeyValueEntry) []ProxyRow {
	rows := map[string]*ProxyRow{}
	row := func(name string) *ProxyRow {
		r := rows[name]
		if r == nil {
			r = &ProxyRow{Name: name, Mode: "?", Phase: events.PhasePending, Healthy: HealthUnknown, Age: "-"}
			rows[name] = r
		}
		return r
	}
	for name, e := range specs {
		r := row(name)
		r.CreatedAt = e.Created()
		if f, ok := specView(e.Value()); ok {
			r.Mode, r.Provider, r.Attributes = f.mode, f.provider, f.attributes
			r.MaxLeases = &f.maxLeases
		}
	}
	for name, e := range statuses {
		var st events.ProxyStatus
		if json.Unmarshal(e.Value(), &st) != nil {
			continue
		}
		r := row(name)
		r.Phase, r.Reason, r.Message = st.Phase, st.Reason, st.Message
		if st.Mode != "" {
			r.Mode = st.Mode
		}
		if st.Provider != "" {
			r.Provider = st.Provider
		}
		if st.IP != "" {
			r.Address = net.JoinHostPort(st.IP, strconv.Itoa(st.Port))
		}
		if st.LastError != nil {
			r.LastError = st.LastError.Class + ": " + st.LastError.Message
		}
		if !st.CreatedAt.IsZero() {
			r.CreatedAt = st.CreatedAt
		}
		r.Healthy = healthOf(health[name], r.Address)
	}
	active := activeLeases(leases)
	out := make([]ProxyRow, 0, len(rows))
	for _, r := range rows {
		r.Leases = active[r.Name]
		r.Age = events.Age(now, r.CreatedAt)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ProxyRow) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// healthOf is True or False only when a verdict exists for the address the proxy has now: a
// record about a previous instance, or one whose thresholds are not met yet, is unknown.
func healthOf(e jetstream.KeyValueEntry, address string) string {
	if e == nil || address == "" {
		return HealthUnknown
	}
	var h events.ProxyHealth
	if json.Unmarshal(e.Value(), &h) != nil || h.Address != address || !h.Judged() {
		return HealthUnknown
	}
	if h.Healthy {
		return HealthTrue
	}
	return HealthFalse
}

// activeLeases counts held slots per proxy; keys are <proxy>.<slot> and the server removes
// expired ones.
func activeLeases(leases map[string]jetstream.KeyValueEntry) map[string]int {
	out := map[string]int{}
	for key := range leases {
		proxy, slot, ok := strings.Cut(key, ".")
		if _, err := strconv.Atoi(slot); ok && err == nil {
			out[proxy]++
		}
	}
	return out
}

// targetRows lists provider targets by provider, then in config order.
func targetRows(entries map[string]jetstream.KeyValueEntry) []TargetRow {
	var checks []events.TargetHealth
	for _, e := range entries {
		var th events.TargetHealth
		if json.Unmarshal(e.Value(), &th) == nil {
			checks = append(checks, th)
		}
	}
	slices.SortFunc(checks, func(a, b events.TargetHealth) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), cmp.Compare(a.Order, b.Order), strings.Compare(a.Target, b.Target))
	})
	out := make([]TargetRow, 0, len(checks))
	for _, th := range checks {
		// Details and Address are left out: the columns are what `egressd status providers`
		// prints, and a provider's details are free-form.
		out = append(out, TargetRow{Provider: th.Provider, Target: th.Target, Ready: th.Ready, Reason: th.Reason,
			LatencyMs: th.LatencyMs, CheckedAt: th.CheckedAt, LastTransitionTime: th.LastTransitionTime, Message: th.Message})
	}
	return out
}
