package statuspage

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

func TestPageShowsTheFleet(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	res, body := get(t, r.handler(t, Config{Title: "egressd lab"}), "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d\n%s", res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{
		`<title>egressd lab</title>`,
		`<meta http-equiv="refresh" content="5">`,
		`<caption>Proxies</caption>`,
		`<th scope="col">Phase</th>`,
		`<th scope="row">crawl-eu-1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(body, `role="alert"`) {
		t.Error("error banner shown although every read succeeded")
	}

	text := visibleText(body)
	for _, want := range []string{
		"Proxies 7", "Healthy 2 of 7; 1 unhealthy, 4 unknown", "Probe overdue 0 of 7", "Anonymity 1 elite; 0 anonymous, 1 transparent, 1 unknown", "Leases 3 active; 6 slots on Ready proxies",
		"Provider targets 2 of 3 ready",
		"Ready: 2", "Provisioning: 1", "Pending: 1", "Unhealthy: 1", "Failed: 1", "Invalid: 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}

	proxies := tableRows(t, body, "proxies")
	if len(proxies) != 7 {
		t.Errorf("%d proxy rows, want 7:\n%s", len(proxies), strings.Join(proxies, "\n"))
	}
	rows := map[string][]string{
		"crawl-eu-1": {"pool=crawl, region=eu", "managed local Ready 127.0.0.2:3128 True elite 2/2 - ", " 2h"},
		"crawl-eu-2": {"Unhealthy 127.0.0.3:3128 False transparent sites see Via, X-Forwarded-For 0/2 ProbeFailing CONNECT example.com:443: connection refused"},
		"crawl-eu-3": {"managed local Pending - unknown - 0/3 -"},
		// Its health record is about an address it no longer has.
		"crawl-us-1": {"managed kvm-home Provisioning - unknown - 0/1 Creating", " Ns"},
		"ext-office": {"external external Ready 203.0.113.7:8080 True - 1/4 ExternalEndpoint", " 3d"},
		"bad-spec":   {"Invalid - unknown - 0/1 UnknownProvider provider \"nosuch\" is not configured (known: kvm-home, local)"},
		"broken-1": {"Failed - unknown - 0/1 PermanentError create failed: kvm-home create: permanent error: storage pool default is full",
			"Last provider error: Permanent: storage pool default is full"},
	}
	for name, wants := range rows {
		row := seconds(rowOf(t, proxies, name))
		for _, w := range wants {
			if !strings.Contains(row, w) {
				t.Errorf("row %s lacks %q:\n%s", name, w, row)
			}
		}
	}
	// A failed or invalid proxy's row is marked, so its message stands out.
	if n := strings.Count(body, `<tr class="problem">`); n != 2 {
		t.Errorf("%d problem rows, want 2 (bad-spec, broken-1)", n)
	}

	pools := strings.Join(tableRows(t, body, "pools"), "\n")
	wantPools := []string{
		"batch Pending 4 0 0 0 0 - - -",
		"crawl Degraded 2 2 1 2 0 2h in 4h - 1 of 2 members Ready",
	}
	if pools != strings.Join(wantPools, "\n") {
		t.Errorf("pool rows:\n%s\nwant:\n%s", pools, strings.Join(wantPools, "\n"))
	}
	// A pool's name shows its members.
	if !strings.Contains(body, `<a href="?pool=crawl" title="Show its members">crawl</a>`) {
		t.Error("the pool does not link to its members")
	}

	targets := seconds(strings.Join(tableRows(t, body, "providers"), "\n"))
	wantTargets := []string{
		"kvm-home hv1 Ready Ready 0 - 38.6 ms Ns ago 26h",
		"kvm-home hv2 Not ready Unreachable 0 - 15000.0 ms Ns ago 25m dial tcp 192.0.2.10:22: i/o timeout",
		"local local Ready Ready 0 - 0.4 ms Ns ago 3h",
	}
	if targets != strings.Join(wantTargets, "\n") {
		t.Errorf("provider rows:\n%s\nwant:\n%s", targets, strings.Join(wantTargets, "\n"))
	}
	limits := strings.Join(tableRows(t, body, "limits"), "\n")
	if !strings.Contains(limits, "local") || !strings.Contains(limits, "kvm-home") {
		t.Errorf("guard rails rows:\n%s", limits)
	}

	evs := tableRows(t, body, "events")
	// The fixture's lease grant is on EGRESS_LEASE_EVENTS: the page lists the lifecycle, which
	// a busy fleet's lease traffic would otherwise crowd out of the last 50.
	wantEvents := []string{
		"phase crawl-us-1 Pending → Provisioning (Creating)",
		"health crawl-eu-2 Unhealthy at 127.0.0.3:3128 — connection refused",
		`phase bad-spec - → Invalid (UnknownProvider) — provider "nosuch" is not configured`,
		"provider kvm-home target hv2 not ready: Unreachable — dial tcp 192.0.2.10:22: i/o timeout",
		"phase crawl-eu-1 Running → Ready",
		"op crawl-eu-1 create on local/local attempt 1: ok (Running 127.0.0.2:3128)",
		"phase crawl-eu-1 Pending → Provisioning (Creating)",
	}
	if len(evs) != len(wantEvents) {
		t.Fatalf("%d event rows, want %d:\n%s", len(evs), len(wantEvents), strings.Join(evs, "\n"))
	}
	for i, w := range wantEvents {
		// Each row starts with the time of day; the rest is what happened.
		if _, rest, _ := strings.Cut(evs[i], " "); rest != w {
			t.Errorf("event %d: %q, want %q", i, rest, w)
		}
	}
}

func TestJSONHasTheSameData(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	res, body := get(t, r.handler(t, Config{}), "/api/status.json")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Title != DefaultTitle || s.RefreshSeconds != 5 || len(s.Errors) != 0 {
		t.Errorf("title %q, refresh %d, errors %v", s.Title, s.RefreshSeconds, s.Errors)
	}
	wantCounts := Counts{Proxies: 7, Phases: map[string]int{"Ready": 2, "Unhealthy": 1, "Pending": 1, "Provisioning": 1, "Invalid": 1, "Failed": 1},
		Healthy: 2, Unhealthy: 1, HealthUnknown: 4, Anonymity: map[string]int{"elite": 1, "transparent": 1, "unknown": 1}, Leases: 3, LeaseCapacity: 6, Targets: 3, TargetsReady: 2,
		Pools: 2, PoolPhases: map[string]int{"Degraded": 1, "Pending": 1}}
	if fmt.Sprint(s.Counts) != fmt.Sprint(wantCounts) {
		t.Errorf("counts %+v\nwant   %+v", s.Counts, wantCounts)
	}
	byName := map[string]fleet.Row{}
	for _, p := range s.Proxies {
		byName[p.Name] = p
	}
	eu1 := byName["crawl-eu-1"]
	if eu1.Mode != "managed" || eu1.Provider != "local" || eu1.Phase != events.PhaseReady || eu1.Address != "127.0.0.2:3128" ||
		eu1.Healthy != fleet.HealthTrue || eu1.Leases != 2 || eu1.MaxLeases == nil || *eu1.MaxLeases != 2 || eu1.Age != "2h" ||
		eu1.Attributes["region"] != "eu" {
		t.Errorf("crawl-eu-1: %+v", eu1)
	}
	if b := byName["broken-1"]; b.Phase != events.PhaseFailed || !strings.Contains(b.Message, "storage pool") || b.LastError == "" {
		t.Errorf("broken-1: %+v", b)
	}
	if eu1.Pool != "crawl" || byName["crawl-eu-3"].Pool != "" {
		t.Errorf("members' pool: %q, %q", eu1.Pool, byName["crawl-eu-3"].Pool)
	}
	// Pools come without the ledger, as proxies come without their statuses.
	if p := s.Pools; len(p) != 2 || p[0].Name != "batch" || p[0].Phase != fleet.PoolPending || *p[0].Desired != 4 ||
		p[1].Name != "crawl" || p[1].Phase != events.PoolDegraded || p[1].Members != 2 || p[1].Ready != 1 || p[1].Leased != 2 ||
		p[1].Oldest != "2h" || p[1].Status != nil || p[1].NextRotation.IsZero() {
		t.Errorf("pools: %+v", p)
	}
	if p := s.Providers; len(p) != 3 || p[0].Target != "hv1" || p[1].Target != "hv2" || p[1].Ready || p[2].Provider != "local" {
		t.Errorf("providers: %+v", p)
	}
	if len(s.Events) != 7 || s.Events[0].Proxy != "crawl-us-1" || s.Events[6].Summary != "Pending → Provisioning (Creating)" {
		t.Errorf("events: %+v", s.Events)
	}
	for i := 1; i < len(s.Events); i++ {
		if s.Events[i].Seq >= s.Events[i-1].Seq {
			t.Errorf("events not newest first: seq %d after %d", s.Events[i].Seq, s.Events[i-1].Seq)
		}
	}
}

// Only the last RecentEvents messages are read, whatever the stream holds.
func TestRecentEventsAreTheLastN(t *testing.T) {
	r := newRig(t)
	for i := range 60 {
		r.publish(t, events.Event{Kind: events.KindPhase, Proxy: fmt.Sprintf("p%d", i), At: r.now.Add(time.Duration(i) * time.Second),
			From: events.PhasePending, Phase: events.PhaseProvisioning})
	}
	_, body := get(t, r.handler(t, Config{RecentEvents: 10}), "/api/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 10 {
		t.Fatalf("%d events, want 10", len(s.Events))
	}
	for i, e := range s.Events {
		if want := fmt.Sprintf("p%d", 59-i); e.Proxy != want || e.Seq != uint64(60-i) {
			t.Errorf("event %d: %s seq %d, want %s seq %d", i, e.Proxy, e.Seq, want, 60-i)
		}
	}
	// Each request deletes its consumer, so a page refreshed all day leaves none behind.
	noConsumersLeft(t, r.store.JS, events.StreamEvents)
	// Fewer events than asked for: all of them.
	_, body = get(t, r.handler(t, Config{RecentEvents: 100}), "/api/status.json")
	s = Snapshot{}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 60 || s.Events[59].Proxy != "p0" {
		t.Errorf("%d events, last %+v", len(s.Events), s.Events[len(s.Events)-1])
	}
}

// An installation with nothing in it yet gets a page with empty sections, and JSON with
// empty lists rather than nulls.
func TestEmptyInstallation(t *testing.T) {
	r := newRig(t)
	h := r.handler(t, Config{})
	res, body := get(t, h, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	for _, want := range []string{"No proxies yet.", "No provider checks yet", "No events yet."} {
		if !strings.Contains(visibleText(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, body = get(t, h, "/api/status.json")
	for _, want := range []string{`"errors": []`, `"proxies": []`, `"providers": []`, `"events": []`} {
		if !strings.Contains(body, want) {
			t.Errorf("JSON lacks %s:\n%s", want, body)
		}
	}
}

func TestOnlyReadRoutes(t *testing.T) {
	r := newRig(t)
	h := r.handler(t, Config{})
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodPut, "/api/status.json", http.StatusMethodNotAllowed},
		{http.MethodHead, "/", http.StatusOK},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, rec.Code, c.code)
		}
	}
}

func TestNewNeedsAStore(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a Store succeeded")
	}
}

var secondsRe = regexp.MustCompile(`\b\d+s\b`)

// seconds replaces ages in seconds ("40s") by "Ns": they depend on how fast the test runs.
func seconds(s string) string { return secondsRe.ReplaceAllString(s, "Ns") }

// An installation without pools is not shown an empty pools table; the JSON still has [].
func TestNoPoolsNoPoolsTable(t *testing.T) {
	r := newRig(t)
	r.put(t, r.store.Proxies, "p1", []byte(`{"provider":"local"}`))
	h := r.handler(t, Config{})
	if _, body := get(t, h, "/"); strings.Contains(body, `<table id="pools"`) || !strings.Contains(body, `<table id="proxies"`) {
		t.Errorf("pools table shown without pools:\n%s", visibleText(body))
	}
	_, body := get(t, h, "/api/status.json")
	if !strings.Contains(body, `"pools": []`) {
		t.Errorf("JSON pools not []:\n%s", body)
	}
}
