package statuspage

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// The first screen: the verdict, then what needs attention, worst first, then pools and
// proxies; charts and events below. Cooldowns and the holders' proxies have tables of their
// own.
func TestFirstScreen(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	_, body := get(t, r.handler(t, Config{}), "/")

	// visibleText puts a space where the headline's tag ends.
	verdict := strings.Replace(visibleText(body[strings.Index(body, `<p class="verdict`):strings.Index(body, `<table id="problems"`)]), " :", ":", 1)
	if want := "6 of 7 proxies need attention: 1 Failed, 1 Invalid, 1 Unhealthy, 1 Provisioning, 1 Pending, " +
		"1 cooling down for every target, 1 Ready but cooling down for some targets, 1 of 3 provider targets not ready, 2 of 2 pools not Ready."; verdict != want {
		t.Errorf("verdict:\n%s\nwant\n%s", verdict, want)
	}
	if !strings.Contains(body, `<p class="verdict bad" id="verdict">`) {
		t.Error("the verdict is not marked bad although a proxy Failed")
	}
	probs := seconds(strings.Join(tableRows(t, body, "problems"), "\n"))
	wantProbs := strings.Join([]string{
		`bad-spec Invalid UnknownProvider: provider "nosuch" is not configured (known: kvm-home, local) 5m`,
		"broken-1 Failed PermanentError: create failed: kvm-home create: permanent error: storage pool default is full " +
			"(last provider error: Permanent: storage pool default is full) 20m",
		"crawl-eu-2 Unhealthy ProbeFailing: CONNECT example.com:443: connection refused 1h",
		"ext-office Ready Cooling down for every target until 12:04 (in 4m): failed, reported by crawler-7 3d",
		"crawl-eu-3 Pending Not Ready; no reason recorded yet Ns",
		"crawl-us-1 Provisioning Creating Ns",
		"crawl-eu-1 Ready Cooling down for shop.example until 12:09 (in 9m): blocked, reported by crawler-7 2h",
	}, "\n")
	if probs != wantProbs {
		t.Errorf("problems:\n%s\nwant\n%s", probs, wantProbs)
	}
	// A Ready proxy cooling down for one target still leases for the others: listed, not counted.
	if n := strings.Count(body, `<tr class="minor">`); n != 1 {
		t.Errorf("%d minor problem rows, want 1 (crawl-eu-1)", n)
	}

	// The order of the page.
	last := -1
	for _, id := range []string{`id="verdict"`, `id="problems"`, `id="pools"`, `id="summary"`, `id="proxies"`, `id="cooldowns"`,
		`id="holders"`, `id="providers"`, `id="lease-traffic"`, `id="events"`} {
		i := strings.Index(body, id)
		if i < 0 || i < last {
			t.Errorf("%s is at %d, after %d: out of order or missing", id, i, last)
		}
		last = i
	}

	// The cooldown that has ended only waits for its TTL: not shown.
	cools := strings.Join(tableRows(t, body, "cooldowns"), "\n")
	if want := "crawl-eu-1 shop.example blocked (strike 2) crawler-7 12:09:00 (in 9m)\next-office every target failed crawler-7 12:04:00 (in 4m)"; cools != want {
		t.Errorf("cooldowns:\n%s\nwant\n%s", cools, want)
	}
	if rows := tableRows(t, body, "holders"); len(rows) != 1 || rows[0] != "crawler-7 3 2 0 0 1m in 4m crawl-eu-1 (2 slots), ext-office" {
		t.Errorf("holders: %q", rows)
	}
	// The routine get is left out of the list, which says so.
	if text := visibleText(body); !strings.Contains(text, "Recent events, newest first (routine successful get ops hidden: 1 among these; egressd events shows every event)") {
		t.Errorf("the events table does not say routine gets are hidden:\n%s", text)
	}
	for _, e := range tableRows(t, body, "events") {
		if strings.Contains(e, " get on ") {
			t.Errorf("a routine get is listed: %q", e)
		}
	}

	// The JSON has the same first screen.
	_, js := get(t, r.handler(t, Config{}), "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	if s.Verdict.Headline != "6 of 7 proxies need attention" || s.Verdict.Attention != 6 || len(s.Problems) != 7 ||
		s.Problems[0].Proxy != "bad-spec" || len(s.Cooldowns) != 2 || s.RoutineHidden != 1 || len(s.Events) != 7 {
		t.Errorf("JSON: verdict %+v, %d problems, %d cooldowns, %d hidden, %d events", s.Verdict, len(s.Problems), len(s.Cooldowns),
			s.RoutineHidden, len(s.Events))
	}
}

// The verdict's line for each shape of fleet.
func TestVerdict(t *testing.T) {
	counts := func(phases map[string]int) Counts {
		c := Counts{Phases: phases, Targets: 2, TargetsReady: 2, Pools: 1, PoolPhases: map[string]int{"Ready": 1}}
		for _, n := range phases {
			c.Proxies += n
		}
		return c
	}
	overdue := Problem{Proxy: "p", Phase: events.PhaseReady, Attention: true, What: []string{"Probe overdue: no probe at its address yet"}}
	some := Problem{Proxy: "q", Phase: events.PhaseReady, What: []string{"Cooling down for a.example until 12:00 (in 1m): blocked"}}
	pending := Problem{Proxy: "r", Phase: events.PhasePending, Attention: true, What: []string{"Creating"}}
	draining := Problem{Proxy: "d", Phase: events.PhaseDraining, What: []string{"ScaleDown"}}
	for _, c := range []struct {
		name       string
		counts     Counts
		probs      []Problem
		incomplete bool
		want       string // class: headline: details
	}{
		{"empty", counts(nil), nil, false, "neutral: No proxies yet: "},
		{"one", counts(map[string]int{"Ready": 1}), nil, false, "ok: The only proxy is Ready: "},
		{"all ready", counts(map[string]int{"Ready": 12}), nil, false, "ok: All 12 proxies Ready: "},
		{"unreadable", counts(map[string]int{"Ready": 12}), nil, true, "bad: Unknown: the proxies could not all be read from NATS: "},
		{"overdue", counts(map[string]int{"Ready": 12}), []Problem{overdue}, false, "bad: 1 of 12 proxies needs attention: 1 probe overdue"},
		{"cooling for a target", counts(map[string]int{"Ready": 12}), []Problem{some}, false,
			"warn: All 12 proxies Ready: 1 Ready but cooling down for some targets"},
		{"on its way", counts(map[string]int{"Ready": 11, "Pending": 1}), []Problem{pending}, false, "warn: 1 of 12 proxies needs attention: 1 Pending"},
		// A pool draining a member it scales down is routine: listed, not counted.
		{"draining", counts(map[string]int{"Ready": 11, "Draining": 1}), []Problem{draining}, false,
			"warn: No proxy needs attention: 1 Draining"},
		{"unknown phase", counts(map[string]int{"Ready": 1, "Hibernating": 2}), []Problem{pending, pending}, false,
			"warn: 2 of 3 proxies need attention: 2 Hibernating"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judge(c.counts, c.probs, c.incomplete)
			if got := v.Class + ": " + v.Headline + ": " + strings.Join(v.Details, ", "); got != c.want {
				t.Errorf("%q, want %q", got, c.want)
			}
		})
	}
	// Provider targets and pools that are not ready make an all-Ready fleet a warning.
	c := counts(map[string]int{"Ready": 2})
	c.TargetsReady, c.PoolPhases = 1, map[string]int{"Degraded": 1}
	if v := judge(c, nil, false); v.Class != "warn" || strings.Join(v.Details, ", ") != "1 of 2 provider targets not ready, 1 of 1 pools not Ready" {
		t.Errorf("%+v", v)
	}
}

// Problems are judged over every proxy, overdue probes included, and cooldowns of proxies
// that are gone are not problems.
func TestProblemsOverdueAndGone(t *testing.T) {
	now := fixedNow
	rows := []fleet.Row{
		{Name: "a", Phase: events.PhaseReady, ProbeOverdue: true, LastProbeAt: now.Add(-3 * time.Minute), Reason: events.ReasonProbeOverdue},
		{Name: "b", Phase: events.PhaseReady},
		{Name: "c", Phase: events.PhaseUnhealthy, ProbeOverdue: true, Reason: events.ReasonProbeOverdue},
		{Name: "d", Phase: events.PhaseDraining, Reason: "ScaleDown"},
	}
	cools := []fleet.CooldownRow{{Proxy: "gone", Result: events.ReportBlocked, Until: now.Add(time.Minute)}}
	var got []string
	for _, p := range problems(rows, cools, now) {
		got = append(got, fmt.Sprintf("%s %t %s", p.Proxy, p.Attention, strings.Join(p.What, " | ")))
	}
	want := []string{
		"c true Not Ready; no reason recorded yet | Probe overdue: no probe at its address yet",
		"a true Probe overdue: the last probe at its address was 3m ago",
		"d false ScaleDown",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Routine successful gets are left out of the page's recent events, which reads further back
// to fill its list; a failed get is no routine and is shown; every get stays in the stream.
func TestRoutineGetsHidden(t *testing.T) {
	r := newRig(t)
	at := r.now.Add(-time.Hour)
	publish := func(ev events.Event) {
		at = at.Add(time.Second)
		ev.At = at
		r.publish(t, ev)
	}
	getOp := func(proxy string, failed bool) *events.OpResult {
		op := &events.OpResult{V: 1, Kind: events.OpGet, Proxy: proxy, Provider: "local", Host: "local", Attempt: 1, Final: true}
		if failed {
			op.ErrorClass, op.Error = events.ClassTransient, "local get: connection reset"
		}
		return op
	}
	for i := range 12 {
		publish(events.Event{Kind: events.KindPhase, Proxy: fmt.Sprintf("p%d", i), From: events.PhasePending, Phase: events.PhaseProvisioning})
		for range 9 {
			publish(events.Event{Kind: events.KindOpResult, Proxy: fmt.Sprintf("p%d", i), Op: getOp(fmt.Sprintf("p%d", i), false)})
		}
	}
	publish(events.Event{Kind: events.KindOpResult, Proxy: "p11", Op: getOp("p11", true)})
	publish(events.Event{Kind: events.KindOpResult, Proxy: "p11", Op: getOp("p11", false)})

	h := r.handler(t, Config{RecentEvents: 5})
	_, body := get(t, h, "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range s.Events {
		got = append(got, e.Proxy+" "+e.Kind)
	}
	// Newest first: the failed get, then the phases of p11 … p8, with the 37 gets among them
	// hidden (1 after the failed one, 9 after each of p11, p10, p9 and p8's phases).
	if strings.Join(got, ", ") != "p11 op, p11 phase, p10 phase, p9 phase, p8 phase" || s.RoutineHidden != 37 {
		t.Errorf("events %s; %d hidden, want 37", strings.Join(got, ", "), s.RoutineHidden)
	}
	if !strings.HasPrefix(s.Events[0].Summary, "get on local/local attempt 1: Transient") {
		t.Errorf("the failed get: %+v", s.Events[0])
	}
	_, page := get(t, h, "/")
	if !strings.Contains(visibleText(page), "routine successful get ops hidden: 37 among these") {
		t.Errorf("the page does not say how many gets it hides:\n%s", visibleText(page))
	}
	// The reads went back in windows of 5, 10, 20 and 15 messages (the rest of the 50 the scan
	// may read), each deleting its consumer; every get is still stored.
	info, err := r.store.JS.Stream(t.Context(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.Consumers != 0 || st.Msgs != 122 {
		t.Errorf("%d consumers left, %d messages stored (want 0 and 122)", st.Consumers, st.Msgs)
	}
	// The scan is bounded: with only gets, the list is empty rather than the stream read whole.
	r2 := newRig(t)
	for range 60 {
		r2.publish(t, events.Event{Kind: events.KindOpResult, Proxy: "p", At: r2.now, Op: getOp("p", false)})
	}
	r2.publish(t, events.Event{Kind: events.KindPhase, Proxy: "p", At: r2.now, From: events.PhasePending, Phase: events.PhaseProvisioning})
	for range 60 {
		r2.publish(t, events.Event{Kind: events.KindOpResult, Proxy: "p", At: r2.now, Op: getOp("p", false)})
	}
	_, body = get(t, r2.handler(t, Config{RecentEvents: 5}), "/api/status.json")
	s = Snapshot{}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 0 || s.RoutineHidden != routineScan*5 {
		t.Errorf("%d events, %d hidden; want none shown past %d messages read", len(s.Events), s.RoutineHidden, routineScan*5)
	}
}
