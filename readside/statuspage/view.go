package statuspage

import (
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

//go:embed page.html.tmpl
var pageSource string

// pageTemplate is parsed once; html/template escapes every value for its context, so a
// proxy message or event text containing markup is shown as text.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"phaseClass":     phaseClass,
	"poolClass":      poolClass,
	"healthClass":    healthClass,
	"anonymityClass": anonymityClass,
	"anonymityCount": func(c map[string]int, a string) int { return c[a] },
	"problem":        problem,
	"leases":         leases,
	"overdueNote":    func(r fleet.Row) bool { return r.ProbeOverdue && r.Reason != events.ReasonProbeOverdue },
	"attrs":          attrs,
	"ms":             func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
	"iso":            func(t time.Time) string { return t.Format(time.RFC3339) },
	"full":           func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
	"target":         func(k string) string { return cmp.Or(k, "(no target)") },
	"add":            func(a, b int) int { return a + b },
}).Parse(pageSource))

// phaseOrder is the order of the summary: lifecycle first, trouble last.
var phaseOrder = []events.Phase{
	events.PhaseReady, events.PhaseRunning, events.PhaseProvisioning, events.PhasePending, events.PhaseReplacing,
	events.PhaseWaiting, events.PhaseDraining, events.PhaseDeleting, events.PhaseUnhealthy, events.PhaseFailed, events.PhaseInvalid,
}

type phaseCount struct {
	Phase  events.Phase
	Count  int
	Link   string // the page filtered to this phase, other filters kept
	Active bool   // the filter is this phase alone
}

// view is what the template renders: the snapshot plus what is easier computed in Go.
type view struct {
	Snapshot
	Phases      []phaseCount
	Events      []eventView
	FilterError string // the query did not parse; the proxies table says so
	Filtered    bool
	First, Last int    // 1-based positions of the rows shown among the matches
	Prev, Next  string // links to the neighbouring pages, empty at either end
	// CustomPerPage is a page size other than the default, which the form keeps; else 0.
	CustomPerPage int
	// Chart is the lease traffic over the window, nil without statistics; BlockedTargets the
	// targets with the most blocked reports in it.
	Chart          *chartView
	BlockedTargets []fleet.StatsRow
	StatsWindow    string
	// StatsTotal sums the window up with every denominator named; "" without statistics.
	StatsTotal string
	// ProblemRows are the first maxProblems of Problems, ProblemsMore how many more there are.
	ProblemRows  []Problem
	ProblemsMore int
}

type eventView struct {
	EventRow
	Clock string // time of day, with the date when not today
	Ago   string
}

// poolView is a pool row with what the template cannot compute: its members' link (the
// proxies table filtered to the pool) and the times as text.
type poolView struct {
	fleet.PoolRow
	Link, DesiredText, Next string
	Autoscale               string // the autoscale line, "" without autoscale
	Boot, PlacementsLine    string // boot times and members per placement, "" without
}

type agedTarget struct {
	TargetRow
	Checked, Since string
}

func newView(s Snapshot) view {
	v := view{Snapshot: s, Filtered: s.Filter != Filter{}}
	add := func(p events.Phase) {
		f := s.Filter
		f.Phase = string(p)
		v.Phases = append(v.Phases, phaseCount{p, s.Counts.Phases[string(p)], link(f, 1, s.Paging.PerPage), s.Filter.Phase == string(p)})
	}
	for _, p := range phaseOrder {
		if s.Counts.Phases[string(p)] > 0 {
			add(p)
		}
	}
	for _, p := range otherPhases(s.Counts.Phases) {
		add(p)
	}
	v.StatsWindow = fleet.FormatWindow(fleet.DefaultStatsWindow)
	if st := s.Stats; st != nil {
		v.Chart = newChart(st)
		v.StatsWindow = fleet.FormatWindow(st.To.Sub(st.From))
		if st.Records > 0 {
			v.StatsTotal = totalText(st.Total, v.StatsWindow)
		}
		for _, r := range st.Rows {
			if r.Blocked > 0 {
				v.BlockedTargets = append(v.BlockedTargets, r)
			}
		}
	}
	v.ProblemRows = s.Problems[:min(len(s.Problems), maxProblems)]
	v.ProblemsMore = len(s.Problems) - len(v.ProblemRows)
	pg := s.Paging
	if pg.PerPage != DefaultPerPage {
		v.CustomPerPage = pg.PerPage
	}
	if len(s.Proxies) > 0 {
		v.First = (pg.Page-1)*pg.PerPage + 1
		v.Last = v.First + len(s.Proxies) - 1
	}
	if pg.Page > 1 {
		v.Prev = link(s.Filter, pg.Page-1, pg.PerPage)
	}
	if pg.Page < pg.Pages {
		v.Next = link(s.Filter, pg.Page+1, pg.PerPage)
	}
	for _, e := range s.Events {
		// In the page's time zone: an event keeps the offset of the process that wrote it,
		// which may be another machine's.
		at := e.At.In(s.GeneratedAt.Location())
		clock := at.Format("15:04:05")
		if !sameDay(at, s.GeneratedAt) {
			clock = at.Format("2006-01-02 15:04:05")
		}
		v.Events = append(v.Events, eventView{EventRow: e, Clock: clock, Ago: events.Age(s.GeneratedAt, e.At)})
	}
	return v
}

// otherPhases are the phases of counts this version does not know, by name: still counted,
// after the known ones.
func otherPhases(counts map[string]int) []events.Phase {
	var other []events.Phase
	for p := range counts {
		if !slices.Contains(phaseOrder, events.Phase(p)) {
			other = append(other, events.Phase(p))
		}
	}
	slices.Sort(other)
	return other
}

// link is a relative URL of this page asking for f at page: "?" and the query, so it works
// wherever the page is mounted.
func link(f Filter, page, perPage int) string {
	return "?" + f.values(page, perPage).Encode()
}

// Incomplete reports whether a failed read left section partial: its empty state then says
// so instead of "nothing yet".
func (v view) Incomplete(section string) bool { return v.incomplete[section] }

// PoolRows pairs each pool with its link and times, for the template.
func (v view) PoolRows() []poolView {
	out := make([]poolView, 0, len(v.Pools))
	for _, p := range v.Pools {
		pv := poolView{PoolRow: p, Link: link(Filter{Pool: p.Name}, 1, v.Paging.PerPage), DesiredText: p.DesiredText(), Next: fleet.Until(v.GeneratedAt, p.NextRotation)}
		if p.Autoscale != nil {
			pv.Autoscale = p.Autoscale.Text(v.GeneratedAt)
		}
		pv.Boot, pv.PlacementsLine = p.BootText(), p.PlacementsText(v.GeneratedAt)
		out = append(out, pv)
	}
	return out
}

// holderView is a holder's row with its name, times and proxies as the page prints them.
type holderView struct {
	fleet.HolderRow
	Name, OldestText, NextText, ProxiesText string
}

// holderProxiesShown bounds the proxies named in a holder's row; /api/leases.json has all.
const holderProxiesShown = 5

// HolderRows are the page's holders, for the template; "(none)" for leases without one, as
// egressd status holders prints them.
func (v view) HolderRows() []holderView {
	out := make([]holderView, 0, len(v.Holders))
	for _, h := range v.Holders {
		hv := holderView{HolderRow: h, Name: cmp.Or(h.Holder, "(none)"), OldestText: "-", NextText: fleet.Until(v.GeneratedAt, h.NextExpiry)}
		if !h.Oldest.IsZero() {
			hv.OldestText = events.Age(v.GeneratedAt, h.Oldest)
		}
		hv.ProxiesText = proxiesText(v.HolderProxies[h.Holder])
		out = append(out, hv)
	}
	return out
}

// proxiesText names the proxies a holder has, with how many slots where more than one:
// "crawl-eu-1 (2 slots), ext-office", then how many more.
func proxiesText(held []heldProxy) string {
	if len(held) == 0 {
		return "-"
	}
	var parts []string
	for _, h := range held[:min(len(held), holderProxiesShown)] {
		p := h.Proxy
		if h.Slots > 1 {
			p += " (" + strconv.Itoa(h.Slots) + " slots)"
		}
		parts = append(parts, p)
	}
	if more := len(held) - holderProxiesShown; more > 0 {
		parts = append(parts, "and "+strconv.Itoa(more)+" more")
	}
	return strings.Join(parts, ", ")
}

// maxTimedRows bounds the tables of things that end at a time (cooldowns, addresses in
// quarantine); /api/status.json has them all.
const maxTimedRows = 50

// timed is a row of such a table with its end as the page prints it: the clock time and how
// long until then.
type timed[T any] struct {
	Row       T
	Clock, In string
}

// timedRows are the first maxTimedRows of rows, each with its end (until of it).
func timedRows[T any](v view, rows []T, until func(T) time.Time) []timed[T] {
	out := []timed[T]{}
	for _, r := range rows[:min(len(rows), maxTimedRows)] {
		u := until(r)
		out = append(out, timed[T]{r, u.In(v.GeneratedAt.Location()).Format("15:04:05"), fleet.Until(v.GeneratedAt, u)})
	}
	return out
}

// CooldownRows are the first cooldowns, for the template.
func (v view) CooldownRows() []timed[fleet.CooldownRow] {
	return timedRows(v, v.Cooldowns, func(c fleet.CooldownRow) time.Time { return c.Until })
}

// CooldownsMore is how many cooldowns the table leaves out.
func (v view) CooldownsMore() int { return max(len(v.Cooldowns)-maxTimedRows, 0) }

// QuarantineRows are the first addresses in quarantine, for the template.
func (v view) QuarantineRows() []timed[events.Quarantine] {
	return timedRows(v, v.Quarantine, func(q events.Quarantine) time.Time { return q.Until })
}

// QuarantineMore is how many addresses in quarantine the table leaves out.
func (v view) QuarantineMore() int { return max(len(v.Quarantine)-maxTimedRows, 0) }

// leaseKeysView is one provider's lease keys report as the page prints it.
type leaseKeysView struct {
	Provider, Phase, Masters, Holding, Reported string
}

// LeaseKeyRows are the providers' lease keys reports: the rotation phase, the masters (the
// signing one first) and how many of the provider's lease-mode proxies hold each.
func (v view) LeaseKeyRows() []leaseKeysView {
	out := []leaseKeysView{}
	for _, r := range v.LeaseKeys {
		held := r.Holding()
		var parts []string
		for _, id := range r.Masters {
			parts = append(parts, fmt.Sprintf("%s: %d of %d", id, held[id], len(r.Proxies)))
		}
		out = append(out, leaseKeysView{Provider: r.Provider, Phase: r.Phase, Masters: strings.Join(r.Masters, ", "),
			Holding: strings.Join(parts, "; "), Reported: events.Age(v.GeneratedAt, r.At) + " ago"})
	}
	return out
}

// totalText sums a window of lease statistics up, every rate with what it is of: a block
// rate is of reports, not of leases, and a window with one report has a rate of 0 or 100 %.
func totalText(t fleet.StatsRow, window string) string {
	s := fmt.Sprintf("Last %s: %s granted; ", window, plural(t.Leases, "lease", "leases"))
	if t.Reports == 0 {
		return s + "no reports, so no block rate."
	}
	return s + fmt.Sprintf("%s, of which %d blocked (%s of reports) and %d failed.", plural(t.Reports, "report", "reports"), t.Blocked, t.RateText(), t.Failed)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Targets pairs each provider row with its ages, for the template.
func (v view) Targets() []agedTarget {
	out := make([]agedTarget, 0, len(v.Providers))
	for _, t := range v.Providers {
		checked := events.Age(v.GeneratedAt, t.CheckedAt)
		if !t.CheckedAt.IsZero() {
			checked += " ago"
		}
		out = append(out, agedTarget{t, checked, events.Age(v.GeneratedAt, t.LastTransitionTime)})
	}
	return out
}

func sameDay(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd
}

// phaseClass picks the badge colour. The phase is always printed as text as well, so the
// colour only helps those who can see it.
func phaseClass(p events.Phase) string {
	switch p {
	case events.PhaseReady:
		return "ok"
	case events.PhaseUnhealthy, events.PhaseWaiting:
		return "warn"
	case events.PhaseInvalid, events.PhaseFailed:
		return "bad"
	case events.PhaseDeleting, events.PhaseDraining:
		return "neutral"
	}
	return "progress"
}

func poolClass(p events.PoolPhase) string {
	switch p {
	case events.PoolReady:
		return "ok"
	case events.PoolDegraded:
		return "warn"
	case events.PoolInvalid:
		return "bad"
	case events.PoolDeleting:
		return "neutral"
	}
	return "progress"
}

func healthClass(h fleet.Health) string {
	switch h {
	case fleet.HealthTrue:
		return "ok"
	case fleet.HealthFalse:
		return "bad"
	}
	return "neutral"
}

// anonymityClass colours a verdict: elite hides everything, anonymous still reveals a proxy,
// transparent hands the client's address to every site.
func anonymityClass(a events.Anonymity) string {
	switch a {
	case events.AnonymityElite:
		return "ok"
	case events.AnonymityAnonymous:
		return "warn"
	case events.AnonymityTransparent:
		return "bad"
	}
	return "neutral"
}

// problem marks the rows whose message is the point: a rejected spec or a proxy given up on.
func problem(p events.Phase) bool { return p == events.PhaseInvalid || p == events.PhaseFailed }

func leases(r fleet.Row) string { return r.LeasesText() }

func attrs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
