package fleet

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// specFields is all the model keeps of a ProxySpec. The parsed spec, with its user-data and
// credentials, never leaves decodeSpecs.
type specFields struct {
	valid          bool // false: the spec does not parse; the reconciler says why (Invalid)
	created        time.Time
	mode, provider string
	maxLeases      int
	attributes     map[string]string
	interval       time.Duration
	pool           string // the owner: the pool whose member this is
	drain          bool   // its pool's controller stopped its leases
}

func decodeSpecs(m map[string]jetstream.KeyValueEntry) map[string]specFields {
	out := make(map[string]specFields, len(m))
	for name, e := range m {
		f := specFields{created: e.Created()}
		if s, err := schemas.ParseProxySpec(e.Value()); err == nil {
			f = specFields{valid: true, created: e.Created(), mode: s.Mode, provider: s.Provider, maxLeases: *s.MaxLeases,
				attributes: maps.Clone(s.Attributes), interval: time.Duration(s.HealthCheck.IntervalSeconds) * time.Second,
				pool: s.Pool, drain: s.Drain}
		}
		out[name] = f
	}
	return out
}

// build joins the buckets by proxy name and judges each row as of now.
func build(now time.Time, in decoded) *Fleet {
	rows := make(map[string]*Row, max(len(in.specs), len(in.statuses)))
	row := func(name string) *Row {
		r := rows[name]
		if r == nil {
			r = &Row{Name: name, Mode: "?", Phase: events.PhasePending, Healthy: HealthUnknown}
			rows[name] = r
		}
		return r
	}
	for name, f := range in.specs {
		r := row(name)
		r.CreatedAt = f.created
		if f.valid {
			r.Mode, r.Provider, r.Attributes, r.interval = f.mode, f.provider, f.attributes, f.interval
			r.MaxLeases = &f.maxLeases
			r.Pool, r.Drain = f.pool, f.drain
		}
	}
	for name, st := range in.statuses {
		r := row(name)
		r.Status = st
		r.Phase, r.Reason, r.Message = st.Phase, st.Reason, st.Message
		if st.Mode != "" {
			r.Mode = st.Mode
		}
		if st.Provider != "" {
			r.Provider = st.Provider
		}
		r.Address = st.Address()
		if st.LastError != nil {
			r.LastError = string(st.LastError.Class) + ": " + st.LastError.Message
		}
		if !st.CreatedAt.IsZero() {
			r.CreatedAt = st.CreatedAt
		}
	}
	ownPoolless(rows, in)
	f := &Fleet{At: now, Rows: make([]Row, 0, len(rows))}
	for _, r := range rows {
		if r.Mode == schemas.ModeExternal {
			// External proxies have no provider; the probers and the metrics call them this.
			r.Provider = events.External
		}
		judge(r, in.health[r.Name], now)
		r.Leases = in.leases[r.Name]
		r.Age = "-"
		if !r.CreatedAt.IsZero() {
			r.Age = events.Age(now, r.CreatedAt)
		}
		f.Rows = append(f.Rows, *r)
	}
	slices.SortFunc(f.Rows, func(a, b Row) int { return strings.Compare(a.Name, b.Name) })
	f.Pools = buildPools(now, in, f.Rows)
	f.Demand = in.demand
	f.Totals = total(f.Rows, in.leases)
	f.Totals.Pools = len(f.Pools)
	f.Totals.PoolPhases = map[events.PoolPhase]int{}
	for i := range f.Pools {
		f.Totals.PoolPhases[f.Pools[i].Phase]++
	}
	return f
}

// activeLeases counts held slots per proxy; keys are <proxy>.<slot> and the server removes
// expired ones.
func activeLeases(leases map[string]jetstream.KeyValueEntry) map[string]int {
	out := map[string]int{}
	for key := range leases {
		if proxy, _, ok := events.ParseSlotKey(key); ok {
			out[proxy]++
		}
	}
	return out
}

func total(rows []Row, active map[string]int) Totals {
	t := Totals{Proxies: len(rows), Phases: map[events.Phase]int{}, Anonymity: map[events.Anonymity]int{}}
	for i := range rows {
		r := &rows[i]
		t.Phases[r.Phase]++
		switch r.Healthy {
		case HealthTrue:
			t.Healthy++
		case HealthFalse:
			t.Unhealthy++
		default:
			t.HealthUnknown++
		}
		if r.ProbeOverdue {
			t.ProbeOverdue++
		}
		if r.Address != "" {
			t.Anonymity[r.Anonymity]++
		}
		if r.Phase == events.PhaseReady && r.MaxLeases != nil {
			t.LeaseCapacity += *r.MaxLeases
		}
	}
	for _, n := range active {
		t.Leases += n
	}
	return t
}
