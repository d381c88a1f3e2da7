package statuspage

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
)

// Snapshot is everything one page shows; /api/status.json is this value.
type Snapshot struct {
	Title          string    `json:"title"`
	GeneratedAt    time.Time `json:"generatedAt"`
	RefreshSeconds int       `json:"refreshSeconds"`
	Errors         []string  `json:"errors"` // reads that failed; their sections are incomplete
	Counts         Counts    `json:"counts"` // over the whole fleet, whatever the filter
	Filter         Filter    `json:"filter"`
	Paging         Paging    `json:"paging"`
	// Proxies is the requested page of the proxies the filter matches, by name. Each is the
	// read model's row without the full recorded status, which `egressd status -o json` has.
	Proxies []fleet.Row `json:"proxies"`
	// Pools is every pool, by name, without the controller's full record (its members'
	// ledger), which `egressd status pools -o json` has; the filter does not apply to them.
	Pools []fleet.PoolRow `json:"pools"`
	// PoolHistory is each autoscaled pool's decisions over the last hour, oldest first: the
	// history its demand chart draws (demandchart.go).
	PoolHistory map[string][]PoolPoint `json:"poolHistory"`
	Providers   []TargetRow            `json:"providers"`
	// Limits is each provider's guard rails: instances against maxInstances, creates in the
	// last minute against the rate, and the proxies each rail holds back.
	Limits []LimitRow `json:"limits"`
	Events []EventRow `json:"events"` // newest first, without routine successful gets
	// RoutineHidden is how many routine successful get ops Events leaves out among the events
	// newer than its oldest; the stream keeps them.
	RoutineHidden int `json:"routineHidden"`
	// Verdict and Problems are the first screen: the fleet in one line, and every proxy with
	// something wrong, worst first (see problems), whatever the filter.
	Verdict  Verdict   `json:"verdict"`
	Problems []Problem `json:"problems"`
	// Cooldowns is every running cooldown of proxy_cooldowns, by proxy and target.
	Cooldowns []fleet.CooldownRow `json:"cooldowns"`
	// Quarantine is every address in quarantine (address_quarantine), the one that ends
	// first first: burned pool members' neighbourhoods kept from new instances.
	Quarantine []events.Quarantine `json:"quarantine"`
	// LeaseKeys is, for each provider whose provisioner delivers lease keys to running
	// proxies, which lease masters each of its proxies holds and the master rotation as it
	// sees it (decision 88): master IDs, never a master.
	LeaseKeys []events.LeaseKeysReport `json:"leaseKeys"`
	// Stats is the lease statistics of the chart and the top blocked targets, which
	// /api/stats.json serves on its own; nil when they could not be read.
	Stats *fleet.Stats `json:"-"`
	Since string       `json:"-"` // the page's since parameter, for its form
	// Holders is who holds the most leases now (at most pageHolders), and HoldersMore how many
	// other holders there are; /api/leases.json serves all of them, with every lease.
	Holders     []fleet.HolderRow `json:"-"`
	HoldersMore int               `json:"-"`
	// HolderProxies is which proxies each of Holders has, by holder, each proxy once with how
	// many of its slots the holder has.
	HolderProxies map[string][]heldProxy `json:"-"`

	// incomplete names the sections ("proxies", "pools", "providers", "events", "stats", "holders", "cooldowns", "quarantine") a failed read left
	// empty or partial, so the page does not call them empty.
	incomplete map[string]bool
}

// Counts is the summary at the top of the page, over the whole fleet.
type Counts struct {
	Proxies       int            `json:"proxies"`
	Phases        map[string]int `json:"phases"` // proxies by phase
	Healthy       int            `json:"healthy"`
	Unhealthy     int            `json:"unhealthy"`
	HealthUnknown int            `json:"healthUnknown"`
	ProbeOverdue  int            `json:"probeOverdue"`
	// Anonymity counts the proxies with an address by verdict, as egress_proxies_anonymity
	// labels them: elite, anonymous, transparent, unknown.
	Anonymity     map[string]int `json:"anonymity"`
	Leases        int            `json:"leases"`        // active leases on every proxy
	LeaseCapacity int            `json:"leaseCapacity"` // maxLeases summed over Ready proxies
	Targets       int            `json:"targets"`
	TargetsReady  int            `json:"targetsReady"`
	Pools         int            `json:"pools"`
	PoolPhases    map[string]int `json:"poolPhases"` // pools by phase
}

// Paging says which part of the matching proxies Proxies is.
type Paging struct {
	Matches int `json:"matches"` // proxies the filter matches
	Page    int `json:"page"`    // 1-based
	PerPage int `json:"perPage"`
	Pages   int `json:"pages"` // at least 1
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
	// Instances on the target against maxInstancesPerTarget (0: none), and the brake when
	// it holds (docs/operations.md).
	Instances    int             `json:"instances"`
	MaxInstances int             `json:"maxInstances,omitempty"`
	Suspect      *events.Suspect `json:"suspect,omitempty"`
}

// LimitRow is one provider's guard rails (fleet.ProviderGuard without its targets, which
// Providers has).
type LimitRow struct {
	Provider            string                `json:"provider"`
	Instances           int                   `json:"instances"`
	MaxInstances        int                   `json:"maxInstances,omitempty"`
	CreatesLastMinute   int                   `json:"createsLastMinute"`
	MaxCreatesPerMinute int                   `json:"maxCreatesPerMinute,omitempty"`
	Waiting             map[events.Reason]int `json:"waiting,omitempty"`
}

// EventRow is one event with a one-line human summary.
type EventRow struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Proxy   string    `json:"proxy"` // the proxy, or the provider of gc and provider events
	Subject string    `json:"subject"`
	Summary string    `json:"summary"`

	routine bool // a successful get: left out of the list (see routine)
}

// pageHolders is how many holders the page lists.
const pageHolders = 10

// load reads the fleet, the provider checks, the event stream and (withStats) the lease statistics and holders in parallel (one slow read
// should not add to another's latency) and builds the snapshot for q. A failed read is
// recorded in Errors and leaves its part empty; the rest is still shown.
func load(ctx context.Context, cfg Config, q query, withStats bool, now time.Time) Snapshot {
	var (
		fl      *fleet.Fleet
		targets []events.TargetHealth
		evs     []EventRow
		hidden  int
		stats   *fleet.Stats
		cools   []fleet.CooldownRow
		quar    []events.Quarantine
		cats    []events.CatalogRecord
		keys    []events.LeaseKeysReport
		hist    map[string][]PoolPoint

		tErr, eErr, sErr, cErr, qErr error
		hErr                         error // the pools' decisions, for their demand charts
		wg                           sync.WaitGroup
	)
	// The page's holders come from the fleet's own read of the lease shards.
	wg.Go(func() {
		b := fleet.FromStore(cfg.Store)
		b.LeaseDetail = withStats
		fl = fleet.Load(ctx, b, now)
	})
	wg.Go(func() { targets, cats, keys, tErr = readProviders(ctx, cfg.Store) })
	wg.Go(func() { evs, hidden, eErr = readRecentEvents(ctx, cfg.Store.JS, cfg.RecentEvents) })
	wg.Go(func() { cools, cErr = fleet.Cooldowns(ctx, cfg.Store.Cooldowns, now) })
	wg.Go(func() { quar, qErr = fleet.Quarantine(ctx, cfg.Store.Quarantine, now) })
	wg.Go(func() { hist, hErr = readScaleHistory(ctx, cfg.Store.JS, now.Add(-demandWindow)) })
	if withStats {
		wg.Go(func() { stats, sErr = fleet.LoadStats(ctx, cfg.Store.JS, q.stats, now) })
	}
	wg.Wait()

	s := Snapshot{
		Title:          cfg.Title,
		GeneratedAt:    now,
		RefreshSeconds: max(int(cfg.Refresh.Round(time.Second)/time.Second), 1),
		Errors:         []string{},
		Filter:         q.echo,

		Events:        evs,
		RoutineHidden: hidden,
		Cooldowns:     cools,
		Quarantine:    quar,
		LeaseKeys:     keys,
		PoolHistory:   hist,
		Stats:         stats,
		Since:         q.since,
		incomplete:    map[string]bool{},
	}
	s.fleetFailed(fl.Errors)
	s.failed("providers", tErr)
	s.Providers, s.Limits = guardRows(fleet.Guards(fl.Rows, cats, targets, now))
	s.failed("events", eErr)
	s.failed("cooldowns", cErr)
	s.failed("quarantine", qErr)
	s.failed("pools", hErr)
	s.failed("stats", sErr)
	if l := fl.Leases; l != nil {
		s.Holders = l.Holders[:min(len(l.Holders), pageHolders)]
		s.HoldersMore = len(l.Holders) - len(s.Holders)
		s.HolderProxies = heldProxies(l.Rows)
		if len(l.Errors) > 0 { // already in s.Errors, as the fleet's
			s.incomplete["holders"] = true
		}
	}
	slices.Sort(s.Errors) // the reads finish in any order; the banner should not reshuffle
	s.Counts = count(fl.Totals, s.Providers)
	s.Proxies, s.Paging = paginate(fl.Select(q.filter), q.page, q.perPage)
	s.Problems = problems(fl.Rows, s.Cooldowns, now)
	s.Verdict = judge(s.Counts, s.Problems, s.incomplete["proxies"])
	s.Pools = poolRows(fl.Pools)
	s.fillEmpty()
	return s
}

// fleetFailed records the fleet's failed reads and the sections they leave incomplete.
func (s *Snapshot) fleetFailed(errs []fleet.ReadError) {
	for _, e := range errs {
		s.Errors = append(s.Errors, e.Error())
		// A pool counts its members from the proxies' rows, so any read the rows need is
		// one the pools need; the pools' own buckets leave the proxies whole.
		s.incomplete["pools"] = true
		if e.Bucket != events.BucketPools && e.Bucket != events.BucketPoolStatus && e.Bucket != events.BucketPoolDemand {
			s.incomplete["proxies"] = true
		}
	}
}

// fillEmpty puts empty lists rather than null, so JSON consumers need no special case.
func (s *Snapshot) fillEmpty() {
	if s.Events == nil {
		s.Events = []EventRow{}
	}
	if s.PoolHistory == nil {
		s.PoolHistory = map[string][]PoolPoint{}
	}
	if s.Cooldowns == nil {
		s.Cooldowns = []fleet.CooldownRow{}
	}
	if s.Quarantine == nil {
		s.Quarantine = []events.Quarantine{}
	}
}

// poolRows are the pools without the controller's full records.
func poolRows(pools []fleet.PoolRow) []fleet.PoolRow {
	out := make([]fleet.PoolRow, len(pools))
	for i, p := range pools {
		p.Status = nil
		out[i] = p
	}
	return out
}

// failed records a read's error, if any, and marks its section incomplete.
func (s *Snapshot) failed(section string, err error) {
	if err != nil {
		s.Errors = append(s.Errors, err.Error())
		s.incomplete[section] = true
	}
}

// heldProxy is a proxy a holder has, and how many of its slots.
type heldProxy struct {
	Proxy string
	Slots int
}

// heldProxies groups lease rows, sorted by holder and proxy (fleet.Leases), by holder.
func heldProxies(rows []fleet.LeaseRow) map[string][]heldProxy {
	out := map[string][]heldProxy{}
	for _, r := range rows {
		hs := out[r.Holder]
		if n := len(hs); n > 0 && hs[n-1].Proxy == r.Proxy {
			hs[n-1].Slots++
			continue
		}
		out[r.Holder] = append(hs, heldProxy{r.Proxy, 1})
	}
	return out
}

// paginate returns page (1-based; past the last it is the last, so a reload after the fleet
// shrank still shows rows) of rows, without their full statuses.
func paginate(rows []fleet.Row, page, perPage int) ([]fleet.Row, Paging) {
	p := Paging{Matches: len(rows), PerPage: perPage, Pages: max((len(rows)+perPage-1)/perPage, 1)}
	p.Page = min(max(page, 1), p.Pages)
	from := min((p.Page-1)*perPage, len(rows))
	out := slices.Clone(rows[from:min(from+perPage, len(rows))])
	for i := range out {
		out[i].Status = nil
	}
	if out == nil {
		out = []fleet.Row{}
	}
	return out, p
}

func count(t fleet.Totals, targets []TargetRow) Counts {
	c := Counts{Proxies: t.Proxies, Phases: map[string]int{}, Healthy: t.Healthy, Unhealthy: t.Unhealthy,
		HealthUnknown: t.HealthUnknown, ProbeOverdue: t.ProbeOverdue, Leases: t.Leases, LeaseCapacity: t.LeaseCapacity,
		Targets: len(targets), Pools: t.Pools, PoolPhases: map[string]int{}, Anonymity: map[string]int{}}
	for a, n := range t.Anonymity {
		c.Anonymity[cmp.Or(string(a), "unknown")] = n
	}
	for p, n := range t.Phases {
		c.Phases[string(p)] = n
	}
	for p, n := range t.PoolPhases {
		c.PoolPhases[string(p)] = n
	}
	for _, tr := range targets {
		if tr.Ready {
			c.TargetsReady++
		}
	}
	return c
}

// readProviders reads the targets' checks, the providers' catalogs and the lease keys reports
// of the providers whose provisioners deliver keys to running proxies.
func readProviders(ctx context.Context, st *kvstore.Store) ([]events.TargetHealth, []events.CatalogRecord, []events.LeaseKeysReport, error) {
	targets, tErr := fleet.Targets(ctx, st.Providers)
	cats, cErr := fleet.Catalogs(ctx, st.Catalog)
	names := make([]string, len(cats))
	for i, c := range cats {
		names[i] = c.Provider
	}
	keys, kErr := fleet.LeaseKeys(ctx, st.Locks, names)
	return targets, cats, keys, errors.Join(tErr, cErr, kErr)
}

// guardRows splits the providers' guard rails into the page's two tables. The targets keep the
// columns `egressd status providers` prints (a check's Details and Address are left out, as
// a provider's details are free-form); a target not checked yet is not shown.
func guardRows(guards []fleet.ProviderGuard) ([]TargetRow, []LimitRow) {
	targets, limits := []TargetRow{}, make([]LimitRow, 0, len(guards))
	for _, g := range guards {
		limits = append(limits, LimitRow{Provider: g.Provider, Instances: g.Instances, MaxInstances: g.MaxInstances,
			CreatesLastMinute: g.CreatesLastMinute, MaxCreatesPerMinute: g.MaxCreatesPerMinute, Waiting: g.Waiting})
		for _, t := range g.Targets {
			th := t.Check
			if th == nil {
				continue
			}
			targets = append(targets, TargetRow{Provider: th.Provider, Target: th.Target, Ready: th.Ready, Reason: th.Reason,
				LatencyMs: th.LatencyMs, CheckedAt: th.CheckedAt, LastTransitionTime: th.LastTransitionTime, Message: th.Message,
				Instances: t.Instances, MaxInstances: t.MaxInstances, Suspect: t.Suspect})
		}
	}
	return targets, limits
}
