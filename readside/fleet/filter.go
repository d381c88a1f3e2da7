package fleet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/egressd/egressd/events"
)

// Phases is every phase a proxy can have (DESIGN §3.4), in lifecycle order.
var Phases = []events.Phase{
	events.PhasePending, events.PhaseInvalid, events.PhaseProvisioning, events.PhaseRunning, events.PhaseReady,
	events.PhaseUnhealthy, events.PhaseDraining, events.PhaseReplacing, events.PhaseDeleting, events.PhaseWaiting, events.PhaseFailed,
}

// Filter selects rows. Each set field must match; within a field any listed value may.
type Filter struct {
	Phases    []events.Phase
	Providers []string
	Selector  map[string]string // every attribute must be present with exactly this value
	Name      string            // a substring of the name
	Pools     []string          // the pool the proxy is a member of (Row.Pool), matched exactly
}

// FilterInput is a filter as a user writes it: each list entry may itself be
// comma-separated ("Ready,Running"; "geo=de,tier=general"), as repeated flags or query
// parameters give them.
type FilterInput struct {
	Phases, Providers, Selectors, Pools []string
	Name                                string
}

// FilterError is a filter term that does not parse. Field is the name both the command's
// flag (--phase) and the page's query parameter (phase=) use.
type FilterError struct {
	Field, Value, Problem string
}

func (e *FilterError) Error() string { return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Problem) }

// ParseFilter checks a filter; its error is a *FilterError naming the field at fault. Phases are matched
// case-insensitively and must be known; a selector term is key=value with a non-empty key,
// and a key may appear once.
func ParseFilter(in FilterInput) (Filter, error) {
	var f Filter
	for _, p := range splitList(in.Phases) {
		i := slices.IndexFunc(Phases, func(k events.Phase) bool { return strings.EqualFold(string(k), p) })
		if i < 0 {
			return Filter{}, &FilterError{"phase", p, "not a phase; one of " + phaseList()}
		}
		if !slices.Contains(f.Phases, Phases[i]) {
			f.Phases = append(f.Phases, Phases[i])
		}
	}
	f.Providers = splitList(in.Providers)
	for _, term := range splitList(in.Selectors) {
		k, v, ok := strings.Cut(term, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return Filter{}, &FilterError{"selector", term, "want key=value with a key"}
		}
		if f.Selector == nil {
			f.Selector = map[string]string{}
		}
		if old, dup := f.Selector[k]; dup {
			return Filter{}, &FilterError{"selector", term, fmt.Sprintf("key %q is already given (as %q); attributes match exactly, so one value per key", k, old)}
		}
		f.Selector[k] = v
	}
	f.Name = strings.TrimSpace(in.Name)
	f.Pools = splitList(in.Pools)
	return f, nil
}

// splitList splits comma-separated entries and drops empty ones.
func splitList(list []string) []string {
	var out []string
	for _, s := range list {
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

func phaseList() string {
	names := make([]string, len(Phases))
	for i, p := range Phases {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// Empty reports whether the filter selects every row.
func (f Filter) Empty() bool {
	return len(f.Phases) == 0 && len(f.Providers) == 0 && len(f.Selector) == 0 && f.Name == "" && len(f.Pools) == 0
}

// Match reports whether r is selected. A row whose spec is not readable has no attributes,
// so no selector matches it.
func (f Filter) Match(r *Row) bool {
	if len(f.Phases) > 0 && !slices.Contains(f.Phases, r.Phase) {
		return false
	}
	if len(f.Providers) > 0 && !slices.Contains(f.Providers, r.Provider) {
		return false
	}
	if len(f.Pools) > 0 && !slices.Contains(f.Pools, r.Pool) {
		return false
	}
	for k, v := range f.Selector {
		if got, ok := r.Attributes[k]; !ok || got != v {
			return false
		}
	}
	return f.Name == "" || strings.Contains(r.Name, f.Name)
}

// Select returns the rows f matches, in the fleet's order.
func (fl *Fleet) Select(f Filter) []Row {
	if f.Empty() {
		return fl.Rows
	}
	var out []Row
	for i := range fl.Rows {
		if f.Match(&fl.Rows[i]) {
			out = append(out, fl.Rows[i])
		}
	}
	return out
}
