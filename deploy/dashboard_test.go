package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const dashboardFile = "grafana/egressd-dashboard.json"

// exportedMetrics are the metrics egressd exports (readside/metrics), with their types; the
// dashboard may query these and nothing else.
var exportedMetrics = map[string]string{
	"egress_proxies":                         "gauge",
	"egress_proxies_healthy":                 "gauge",
	"egress_proxies_anonymity":               "gauge",
	"egress_proxies_probe_overdue":           "gauge",
	"egress_limit_waiting_proxies":           "gauge",
	"egress_limit_instances":                 "gauge",
	"egress_limit_max_instances":             "gauge",
	"egress_limit_creates_last_minute":       "gauge",
	"egress_brake_suspect":                   "gauge",
	"egress_leases_active":                   "gauge",
	"egress_lease_requests_total":            "counter",
	"egress_lease_acquire_duration_seconds":  "histogram",
	"egress_provider_ops_total":              "counter",
	"egress_provider_op_duration_seconds":    "histogram",
	"egress_host_ops_in_flight":              "gauge",
	"egress_host_ops_pending":                "gauge",
	"egress_probe_duration_seconds":          "histogram",
	"egress_probe_failures_total":            "counter",
	"egress_probe_delay_seconds":             "histogram",
	"egress_prober_owned_proxies":            "gauge",
	"egress_prober_backlog_proxies":          "gauge",
	"egress_prober_lag_seconds":              "gauge",
	"egress_provider_target_up":              "gauge",
	"egress_provider_check_duration_seconds": "gauge",
	"egress_gc_deletions_total":              "counter",
	"egress_nats_client_reconnects_total":    "counter",
	"egress_jetstream_messages":              "gauge",
	"egress_pool_info":                       "gauge",
	"egress_pool_desired":                    "gauge",
	"egress_pool_demand_held":                "gauge",
	"egress_pool_demand_waiting":             "gauge",
	"egress_pool_demand_refused":             "gauge",
	"egress_pool_demand_grants_per_second":   "gauge",
	"egress_pool_demand_leasers":             "gauge",
	"egress_pool_autoscale_wanted":           "gauge",
	"egress_pool_autoscale_limit":            "gauge",
	"egress_pool_members":                    "gauge",
	"egress_pool_ready":                      "gauge",
	"egress_pool_leased":                     "gauge",
	"egress_pool_draining":                   "gauge",
}

// seriesNames are the series names a query may use: a histogram is queried through its
// _bucket, _sum and _count series, every other metric by its name.
func seriesNames() map[string]string {
	out := map[string]string{}
	for name, typ := range exportedMetrics {
		if typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = name
			}
			continue
		}
		out[name] = name
	}
	return out
}

// promqlWords are the PromQL functions, aggregations and keywords a query may contain: every
// other bare identifier outside label matchers and grouping lists is a metric name.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		sum min max avg count group stddev stdvar topk bottomk quantile count_values limitk limit_ratio
		by without on ignoring group_left group_right and or unless bool offset atan2 inf nan
		rate irate increase delta idelta deriv predict_linear resets changes
		avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time
		quantile_over_time stddev_over_time stdvar_over_time present_over_time absent_over_time
		histogram_quantile histogram_count histogram_sum histogram_fraction histogram_avg
		abs absent ceil floor round clamp clamp_min clamp_max exp ln log2 log10 sqrt sgn scalar
		vector time timestamp label_replace label_join sort sort_desc sort_by_label sort_by_label_desc
		day_of_month day_of_week day_of_year days_in_month hour minute month year`) {
		promqlWords[w] = true
	}
}

var (
	reString     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	reVariable   = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	reMatchers   = regexp.MustCompile(`\{[^{}]*\}`)
	reRange      = regexp.MustCompile(`\[[^\[\]]*\]`)
	reGrouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	reIdentifier = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	reDuration   = regexp.MustCompile(`^\d`)
)

// metricNames returns the metric names a PromQL expression selects, or an error when the
// expression is not even balanced.
func metricNames(expr string) ([]string, error) {
	if err := balanced(expr); err != nil {
		return nil, err
	}
	s := reString.ReplaceAllString(expr, `""`)
	s = reVariable.ReplaceAllString(s, "1")
	s = reMatchers.ReplaceAllString(s, "")
	s = reRange.ReplaceAllString(s, "")
	s = reGrouping.ReplaceAllString(s, "$1")
	var names []string
	for _, loc := range reIdentifier.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if promqlWords[word] || (loc[0] > 0 && reDuration.MatchString(s[loc[0]-1:loc[0]])) {
			continue // a function, keyword, or the unit of a number like 1h or 1e3
		}
		names = append(names, word)
	}
	return names, nil
}

func balanced(expr string) error {
	s := reString.ReplaceAllString(expr, `""`)
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range s {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return nil
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestDashboardQueriesExportedMetrics keeps the dashboard from drifting away from the metrics:
// every query must select only metrics egressd exports (a renamed metric fails here, not as an
// empty panel in production), and every exported metric must be on the dashboard.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	series := seriesNames()
	used := map[string]bool{}
	check := func(where, expr string) {
		t.Helper()
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v in %q", where, err, expr)
			return
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		for _, n := range names {
			m, ok := series[n]
			if !ok {
				t.Errorf("%s: %q queries %q, which egressd does not export (known: %v)", where, expr, n, sortedKeys(exportedMetrics))
				continue
			}
			if exportedMetrics[m] == "histogram" && !strings.HasSuffix(n, "_count") && !strings.HasSuffix(n, "_sum") &&
				!strings.Contains(expr, "histogram_quantile") {
				t.Errorf("%s: %q reads the buckets of %s outside histogram_quantile", where, expr, m)
			}
			if exportedMetrics[m] == "counter" && !regexp.MustCompile(`\b(rate|irate|increase)\(\s*`+n).MatchString(expr) {
				t.Errorf("%s: %q uses the counter %s without rate or increase", where, expr, n)
			}
			used[m] = true
		}
	}
	exprs := 0
	for _, p := range allPanels(d.Panels) {
		if p.Type == "row" {
			continue
		}
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		for _, tg := range p.Targets {
			exprs++
			check(where+" query "+tg.RefID, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Errorf("variable %s: unreadable query %s", v.Name, v.Query)
				continue
			}
			q.Query = s
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(q.Query, "label_values("), ")")
		if i := strings.LastIndex(inner, ","); i >= 0 {
			inner = inner[:i]
		}
		check("variable "+v.Name, inner)
	}
	t.Logf("%d queries checked", exprs)
	for _, m := range sortedKeys(exportedMetrics) {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// TestDashboardShape checks what Grafana needs to import the dashboard and what makes it
// portable: a data-source variable every query goes through, a provider variable, unique
// panel IDs, and panels that fit the 24-column grid without overlapping.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q and uid %q are required", d.Title, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("want a variable named datasource of type datasource, have %v", vars)
	}
	if vars["provider"] != "query" {
		t.Errorf("want a query variable named provider, have %v", vars)
	}
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	providerFiltered := 0
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share the id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d,%d)", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: its datasource must be ${datasource}, is %+v", p.Title, p.Datasource)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q query %s: its datasource must be ${datasource}, is %+v", p.Title, tg.RefID, tg.Datasource)
			}
			if strings.Contains(tg.Expr, `provider=~"$provider"`) {
				providerFiltered++
			}
		}
	}
	if providerFiltered == 0 {
		t.Error(`no query filters on provider=~"$provider"`)
	}
}

// TestMetricNamesParser keeps the checker itself honest on the shapes the dashboard uses.
func TestMetricNamesParser(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (provider, phase) (egress_proxies{provider=~"$provider", phase="Ready"})`:                      {"egress_proxies"},
		`histogram_quantile(0.95, sum by (le) (rate(egress_probe_duration_seconds_bucket[$__rate_interval])))`: {"egress_probe_duration_seconds_bucket"},
		`sum(rate(a_total[5m])) / sum(rate(b_count[1h])) or vector(0)`:                                         {"a_total", "b_count"},
		`count(max by (provider, target) (up{job="x"}) == 0)`:                                                  {"up"},
		`max without (instance) (egress_leases_active) offset 1h > bool 1e3`:                                   {"egress_leases_active"},
		`label_replace(foo{a="b}"}, "dst", "$1", "src", "(.*)")`:                                               {"foo"},
	} {
		got, err := metricNames(expr)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q", expr, got, err, want)
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `x{a="b"`, `x)`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q): want an error for unbalanced brackets", bad)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
