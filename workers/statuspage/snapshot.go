package statuspage

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Snapshot is everything one page shows; /api/status.json is this value.
type Snapshot struct {
	Title          string      `json:"title"`
	GeneratedAt    time.Time   `json:"generatedAt"`
	RefreshSeconds int         `json:"refreshSeconds"`
	Errors         []string    `json:"errors"` // reads that failed; their sections are incomplete
	Counts         Counts      `json:"counts"`
	Proxies        []ProxyRow  `json:"proxies"`
	Providers      []TargetRow `json:"providers"`
	Events         []EventRow  `json:"events"` // newest first

	// incomplete names the sections ("proxies", "providers", "events") a failed read left
	// empty or partial, so the page does not call them empty.
	incomplete map[string]bool
}

// Counts is the summary at the top of the page.
type Counts struct {
	Proxies       int            `json:"proxies"`
	Phases        map[string]int `json:"phases"` // proxies by phase
	Healthy       int            `json:"healthy"`
	Unhealthy     int            `json:"unhealthy"`
	HealthUnknown int            `json:"healthUnknown"`
	Leases        int            `json:"leases"`        // active leases on every proxy
	LeaseCapacity int            `json:"leaseCapacity"` // maxLeases summed over Ready proxies
	Targets       int            `json:"targets"`
	TargetsReady  int            `json:"targetsReady"`
}

// Healthy values of ProxyRow: a verdict only once a prober's thresholds produced one for the
// proxy's current address.
const (
	HealthTrue    = "True"
	HealthFalse   = "False"
	HealthUnknown = "unknown"
)

// ProxyRow is one proxy.
type ProxyRow struct {
	Name       string            `json:"name"`
	Mode       string            `json:"mode"`
	Provider   string            `json:"provider"`
	Phase      events.Phase      `json:"phase"`
	Address    string            `json:"address"`
	Healthy    string            `json:"healthy"` // True, False or unknown
	Leases     int               `json:"leases"`
	MaxLeases  *int              `json:"maxLeases"` // null when the spec is missing or invalid
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	LastError  string            `json:"lastError,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
	CreatedAt  time.Time         `json:"createdAt,omitzero"`
	Age        string            `json:"age"`
}

// TargetRow is the latest check of one provider target.
type TargetRow struct {
	Provider           string    `json:"provider"`
	Target             string    `json:"target"`
	Ready              bool      `json:"ready"`
	Reason             string    `json:"reason"`
	LatencyMs          float64   `json:"latencyMs"`
	CheckedAt          time.Time `json:"checkedAt"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	Message            string    `json:"message,omitempty"`
}

// EventRow is one event with a one-line human summary.
type EventRow struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Proxy   string    `json:"proxy"` // the proxy, or the provider of gc and provider events
	Subject string    `json:"subject"`
	Summary string    `json:"summary"`
}

// reads is what load gathers from NATS before building rows.
type reads struct {
	specs, statuses, health, leases, targets map[string]jetstream.KeyValueEntry
	events                                   []EventRow
}

// load reads every bucket and the event stream in parallel (one slow read should not add to
// another's latency) and builds the snapshot. A failed read is recorded in Errors and leaves
// its part empty; the rest is still shown.
func load(ctx context.Context, cfg Config, now time.Time) Snapshot {
	var (
		rd         reads
		mu         sync.Mutex
		errs       []string
		incomplete = map[string]bool{}
		wg         sync.WaitGroup
	)
	fail := func(section string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err.Error())
		incomplete[section] = true
	}
	bucket := func(section string, kv jetstream.KeyValue, dst *map[string]jetstream.KeyValueEntry) {
		wg.Go(func() {
			m, err := kvstore.Latest(ctx, kv)
			if err != nil {
				fail(section, err)
			}
			*dst = m
		})
	}
	st := cfg.Store
	bucket("proxies", st.Proxies, &rd.specs)
	bucket("proxies", st.Status, &rd.statuses)
	bucket("proxies", st.Health, &rd.health)
	bucket("proxies", st.Leases, &rd.leases)
	bucket("providers", st.Providers, &rd.targets)
	wg.Go(func() {
		evs, err := readRecentEvents(ctx, st.JS, cfg.RecentEvents)
		if err != nil {
			fail("events", err)
		}
		rd.events = evs
	})
	wg.Wait()
	slices.Sort(errs) // the reads finish in any order; the banner should not reshuffle

	s := Snapshot{
		Title:          cfg.Title,
		GeneratedAt:    now,
		RefreshSeconds: int(cfg.Refresh.Round(time.Second) / time.Second),
		Errors:         errs,
		Proxies:        proxyRows(now, rd.specs, rd.statuses, rd.health, rd.leases),
		Providers:      targetRows(rd.targets),
		Events:         rd.events,
		incomplete:     incomplete,
	}
	s.RefreshSeconds = max(s.RefreshSeconds, 1)
	s.Counts = count(s.Proxies, s.Providers, activeLeases(rd.leases))
	// Empty lists rather than null, so JSON consumers need no special case.
	if s.Errors == nil {
		s.Errors = []string{}
	}
	if s.Proxies == nil {
		s.Proxies = []ProxyRow{}
	}
	if s.Providers == nil {
		s.Providers = []TargetRow{}
	}
	if s.Events == nil {
		s.Events = []EventRow{}
	}
	return s
}

func count(proxies []ProxyRow, targets []TargetRow, leases map[string]int) Counts {
	c := Counts{Proxies: len(proxies), Phases: map[string]int{}, Targets: len(targets)}
	for _, p := range proxies {
		c.Phases[string(p.Phase)]++
		switch p.Healthy {
		case HealthTrue:
			c.Healthy++
		case HealthFalse:
			c.Unhealthy++
		default:
			c.HealthUnknown++
		}
		if p.Phase == events.PhaseReady && p.MaxLeases != nil {
			c.LeaseCapacity += *p.MaxLeases
		}
	}
	// Every held slot counts, also one whose proxy was deleted while a lease still runs.
	for _, n := range leases {
		c.Leases += n
	}
	for _, t := range targets {
		if t.Ready {
			c.TargetsReady++
		}
	}
	return c
}
