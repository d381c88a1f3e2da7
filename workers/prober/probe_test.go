package prober

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestProbeThroughForwardProxy(t *testing.T) {
	e := newEnv(t)
	open, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	guarded, _ := startForwardProxy(t, "127.0.0.3:0", "crawler", "right")
	p := e.prober(nil, Config{})
	for _, tc := range []struct {
		name       string
		addr       string
		user, pass string
		wantErr    string // "" for success
	}{
		{name: "no auth", addr: open},
		{name: "right auth", addr: guarded, user: "crawler", pass: "right"},
		{name: "wrong password", addr: guarded, user: "crawler", pass: "wrong", wantErr: "407 Proxy Authentication Required"},
		{name: "missing auth", addr: guarded, wantErr: "407 Proxy Authentication Required"},
		{name: "nothing listening", addr: closedAddr(t), wantErr: "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := strings.ReplaceAll(tc.name, " ", "-")
			e.putSpec(proxy, spec{check: map[string]any{"successThreshold": 2, "failureThreshold": 2}, user: tc.user, password: tc.pass})

			first := e.probeNow(p, proxy, tc.addr)
			if first.Healthy {
				t.Fatalf("healthy after one probe: %+v", first)
			}
			h := e.probeNow(p, proxy, tc.addr)
			if h.Proxy != proxy || h.Address != tc.addr || h.CheckURL != e.echoURL || h.Prober != "prober-1" || h.V != 1 ||
				h.SuccessThreshold != 2 || h.FailureThreshold != 2 || h.LastProbeAt.IsZero() {
				t.Errorf("record: %+v", h)
			}
			if tc.wantErr != "" {
				if h.Healthy || h.ConsecutiveFailures != 2 || h.ConsecutiveSuccesses != 0 || !strings.Contains(h.LastError, tc.wantErr) {
					t.Fatalf("want unhealthy with %q: %+v", tc.wantErr, h)
				}
				if ev := e.healthEvents(proxy); len(ev) != 1 || ev[0].Reason != events.ReasonUnhealthy || ev[0].Message != h.LastError {
					t.Errorf("events %+v", ev)
				}
				return
			}
			if !h.Healthy || h.ConsecutiveSuccesses != 2 || h.ConsecutiveFailures != 0 || h.LastError != "" {
				t.Fatalf("want healthy: %+v", h)
			}
			if h.EgressIP != "127.0.0.1" || len(h.LeakedHeaders) != 0 || h.LatencyMs <= 0 || h.LastSuccessAt.IsZero() {
				t.Errorf("echo details: %+v", h)
			}
			ev := e.healthEvents(proxy)
			if len(ev) != 1 || ev[0].Reason != events.ReasonHealthy || ev[0].Health == nil || !ev[0].Health.Healthy || ev[0].Proxy != proxy || ev[0].ID == "" {
				t.Errorf("events %+v", ev)
			}
		})
	}
}

func TestProxyDownAndBack(t *testing.T) {
	e := newEnv(t)
	addr, stop := startForwardProxy(t, "127.0.0.2:0", "", "")
	obs := &countingObserver{}
	p := e.prober(nil, Config{Observer: obs})
	e.putSpec("p1", spec{check: map[string]any{"successThreshold": 2, "failureThreshold": 3}})

	steps := []struct {
		do      func()
		healthy bool
	}{
		{nil, false}, {nil, true}, // two successes
		{stop, true}, {nil, true}, {nil, false}, // three failures
		{func() { startForwardProxy(t, addr, "", "") }, false}, {nil, true}, // back
	}
	for i, s := range steps {
		if s.do != nil {
			s.do()
		}
		if h := e.probeNow(p, "p1", addr); h.Healthy != s.healthy {
			t.Fatalf("probe %d: healthy %v, want %v: %+v", i+1, h.Healthy, s.healthy, h)
		}
	}
	if got := reasons(e.healthEvents("p1")); !slices.Equal(got, []events.Reason{events.ReasonHealthy, events.ReasonUnhealthy, events.ReasonHealthy}) {
		t.Errorf("events %v", got)
	}
	if obs.ok != 4 || obs.failed != 3 {
		t.Errorf("observed %d good and %d failed probes, want 4 and 3", obs.ok, obs.failed)
	}
}

type countingObserver struct {
	noObserver
	ok, failed int
}

func (o *countingObserver) ObserveProbe(ok bool, _ time.Duration) {
	if ok {
		o.ok++
	} else {
		o.failed++
	}
}

func TestHTTPSCheckURL(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	target := httptest.NewTLSServer(EchoHandler())
	t.Cleanup(target.Close)
	e.putSpec("p1", spec{check: map[string]any{"url": target.URL + "/echo?x=1"}})

	// The system roots do not know httptest's certificate.
	h := e.probeNow(e.prober(nil, Config{}), "p1", addr)
	if h.ConsecutiveFailures != 1 || !strings.Contains(h.LastError, "certificate") {
		t.Fatalf("verified TLS: %+v", h)
	}
	h = e.probeNow(e.prober(nil, Config{InsecureSkipVerify: true}), "p1", addr)
	if !h.Healthy || h.EgressIP != "127.0.0.1" || h.CheckURL != target.URL+"/echo?x=1" {
		t.Fatalf("TLS without verification: %+v", h)
	}
}

func TestNonEchoCheckURL(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	for _, tc := range []struct {
		name    string
		status  int
		healthy bool
	}{{"ok", 204, true}, {"not-found", 404, false}, {"redirect", 302, false}} {
		t.Run(tc.name, func(t *testing.T) {
			target := httptest.NewServer(statusHandler(tc.status))
			t.Cleanup(target.Close)
			e.putSpec(tc.name, spec{check: map[string]any{"url": target.URL, "failureThreshold": 1}})
			h := e.probeNow(e.prober(nil, Config{}), tc.name, addr)
			if h.Healthy != tc.healthy || h.EgressIP != "" {
				t.Fatalf("%+v", h)
			}
		})
	}
}

func TestLeakedHeaders(t *testing.T) {
	e := newEnv(t)
	addr := startLeakyProxy(t, map[string]string{"Via": "1.1 squid", "X-Forwarded-For": "10.1.2.3"}, false)
	e.putSpec("p1", spec{})
	// An injected clock stamps the record (behind the request's time, so it is not stale).
	at := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	h := e.probeNow(e.prober(nil, Config{Now: func() time.Time { return at }}), "p1", addr)
	if !h.Healthy || !slices.Equal(h.LeakedHeaders, []string{"Via", "X-Forwarded-For"}) {
		t.Fatalf("%+v", h)
	}
	if !h.LastProbeAt.Equal(at) || !h.LastSuccessAt.Equal(at) || !h.LastTransitionAt.Equal(at) {
		t.Errorf("timestamps not from the injected clock: %+v", h)
	}
}

func TestAddressChangeStartsAfresh(t *testing.T) {
	e := newEnv(t)
	a, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	b, _ := startForwardProxy(t, "127.0.0.3:0", "", "")
	p := e.prober(nil, Config{})
	e.putSpec("p1", spec{check: map[string]any{"successThreshold": 2}})
	e.probeNow(p, "p1", a)
	if h := e.probeNow(p, "p1", a); !h.Healthy {
		t.Fatalf("old instance: %+v", h)
	}
	h := e.probeNow(p, "p1", b)
	if h.Healthy || h.ConsecutiveSuccesses != 1 || h.Address != b {
		t.Fatalf("the replacement inherited the old standing: %+v", h)
	}
	// The replacement's first verdict is announced, though the old one was healthy too.
	e.probeNow(p, "p1", b)
	if got := reasons(e.healthEvents("p1")); !slices.Equal(got, []events.Reason{events.ReasonHealthy, events.ReasonHealthy}) {
		t.Errorf("events %v", got)
	}
}
