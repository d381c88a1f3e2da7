package statuspage

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/egressd/egressd/readside/fleet"
)

// Paging of the proxies table, and the length of the top blocked targets.
const (
	topBlockedTargets = 10

	DefaultPerPage = 100
	maxPerPage     = 1000
)

// Filter is the filter a request asked for, as written: the page's form shows it and its
// links carry it. Each field may list several values, comma-separated.
type Filter struct {
	Phase    string `json:"phase,omitempty"`
	Provider string `json:"provider,omitempty"`
	Selector string `json:"selector,omitempty"` // key=value,…: attributes, matched exactly
	Q        string `json:"q,omitempty"`        // a substring of the name
	Pool     string `json:"pool,omitempty"`     // pools whose members to show, by their spec's owner
}

// query is a request's filter and page, checked, and the window of its lease statistics.
type query struct {
	filter        fleet.Filter
	echo          Filter
	page, perPage int
	stats         fleet.StatsQuery
	since         string // as written, for the form to carry; "" is the default
}

// parseQuery reads phase, provider, selector, pool (each repeatable or comma-separated), q, page,
// per_page and since (the window of the lease statistics). Its error names the parameter at fault; unknown parameters are ignored.
func parseQuery(v url.Values) (query, error) {
	q := query{
		echo: Filter{Phase: joinParam(v["phase"]), Provider: joinParam(v["provider"]), Selector: joinParam(v["selector"]), Q: v.Get("q"),
			Pool: joinParam(v["pool"])},
		page:    1,
		perPage: DefaultPerPage,
	}
	f, err := fleet.ParseFilter(fleet.FilterInput{Phases: v["phase"], Providers: v["provider"], Selectors: v["selector"], Pools: v["pool"], Name: v.Get("q")})
	if err != nil {
		return q, err
	}
	q.filter = f
	// The page's statistics: the top blocked targets over since, and the series for the chart.
	q.since = v.Get("since")
	if q.stats, err = fleet.ParseStatsQuery(fleet.StatsInput{Since: q.since, Sort: string(fleet.SortByBlocked)}); err != nil {
		return q, err
	}
	q.stats.Top = topBlockedTargets
	if s := v.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, fmt.Errorf("page %q: want a whole number from 1", s)
		}
		q.page = n
	}
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPerPage {
			return q, fmt.Errorf("per_page %q: want a whole number from 1 to %d", s, maxPerPage)
		}
		q.perPage = n
	}
	return q, nil
}

func joinParam(vals []string) string {
	var out []string
	for _, s := range vals {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// values is the query string that asks for f, page and perPage again, leaving defaults out so
// links stay short.
func (f Filter) values(page, perPage int) url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("phase", f.Phase)
	set("provider", f.Provider)
	set("selector", f.Selector)
	set("q", f.Q)
	set("pool", f.Pool)
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	if perPage != DefaultPerPage {
		v.Set("per_page", strconv.Itoa(perPage))
	}
	return v
}
