package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
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
			// egressd's forward proxy is elite on both paths, with and without auth.
			if h.Anonymity != events.AnonymityElite || len(h.Paths) != 2 {
				t.Errorf("anonymity %q, paths %+v", h.Anonymity, h.Paths)
			}
			for _, pc := range h.Paths {
				if pc.Anonymity != events.AnonymityElite || pc.EgressIP != "127.0.0.1" || pc.Error != "" || len(pc.Leaked) != 0 {
					t.Errorf("path %+v", pc)
				}
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
			// The plain-HTTP path still goes to the prober's echo endpoint and judges.
			if h.Anonymity != events.AnonymityElite || len(h.Paths) != 2 || h.Paths[1].Anonymity != events.AnonymityElite ||
				h.Paths[1].EgressIP != "127.0.0.1" || h.Paths[0].Anonymity != "" || h.Paths[0].Error == "" {
				t.Errorf("paths %+v anonymity %q", h.Paths, h.Anonymity)
			}
			if tc.healthy && h.Paths[0].Error != errNotEcho {
				t.Errorf("connect path: %+v", h.Paths[0])
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
	if !h.Healthy || !slices.Equal(h.LeakedHeaders, []string{"Via", "X-Forwarded-For"}) || h.Anonymity != events.AnonymityAnonymous {
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

// A proxy that passes the client's address on only when it forwards plain HTTP (as stock
// Squid does; a tunnel it cannot touch): the CONNECT path is elite, the forward path
// transparent, the proxy transparent. Fixed, it is elite, and the change is one event each
// way; a probe that changes nothing announces nothing.
func TestAnonymityPerPath(t *testing.T) {
	e := newEnv(t)
	addr, set := startSwitchableLeaky(t, nil, false)
	p := e.prober(nil, Config{})
	e.putSpec("p1", spec{})

	set(map[string]string{"forward:Via": "1.1 vm (squid/5.7)", "forward:X-Forwarded-For": "{client}"})
	h := e.probeNow(p, "p1", addr)
	if h.Anonymity != events.AnonymityTransparent || !slices.Equal(h.LeakedHeaders, []string{"Via", "X-Forwarded-For"}) {
		t.Fatalf("stock: %+v", h)
	}
	if c, f := h.Paths[0], h.Paths[1]; c.Anonymity != events.AnonymityElite || len(c.Leaked) != 0 ||
		f.Anonymity != events.AnonymityTransparent || !slices.Equal(f.Leaked, []string{"Via", "X-Forwarded-For"}) {
		t.Errorf("paths %+v", h.Paths)
	}
	set(map[string]string{"forward:X-Forwarded-For": "unknown"})
	if h = e.probeNow(p, "p1", addr); h.Anonymity != events.AnonymityAnonymous || !slices.Equal(h.LeakedHeaders, []string{"X-Forwarded-For"}) {
		t.Fatalf("forwarded_for off: %+v", h)
	}
	set(nil)
	if h = e.probeNow(p, "p1", addr); h.Anonymity != events.AnonymityElite || len(h.LeakedHeaders) != 0 {
		t.Fatalf("fixed: %+v", h)
	}
	e.probeNow(p, "p1", addr)
	var changes []string
	for _, ev := range e.healthEvents("p1") {
		if ev.Reason == events.ReasonAnonymityChanged {
			if ev.Health == nil || ev.Health.Anonymity == "" {
				t.Errorf("event without the record: %+v", ev)
			}
			changes = append(changes, ev.Message)
		}
	}
	want := []string{"anonymity anonymous (was transparent); the sites see X-Forwarded-For", "anonymity elite (was anonymous)"}
	if !slices.Equal(changes, want) {
		t.Errorf("anonymity events %q, want %q", changes, want)
	}
}

// The plain-HTTP path carries the proxy credential and egressd's forward proxy keeps it; a
// proxy that passes it on to the site is caught on that path too.
func TestForwardPathAuth(t *testing.T) {
	e := newEnv(t)
	guarded, _ := startForwardProxy(t, "127.0.0.3:0", "crawler", "right")
	leaky := startLeakyProxy(t, nil, true)
	p := e.prober(nil, Config{})
	e.putSpec("wrong", spec{user: "crawler", password: "wrong"})
	h := e.probeNow(p, "wrong", guarded)
	if h.Paths[1].Error != "proxy refused the plain-HTTP request: 407 Proxy Authentication Required" || h.Paths[1].Anonymity != "" {
		t.Errorf("wrong credential on the forward path: %+v", h.Paths[1])
	}
	e.putSpec("leaky", spec{user: "crawler", password: "right"})
	h = e.probeNow(p, "leaky", leaky)
	if h.Anonymity != events.AnonymityAnonymous || !slices.Equal(h.Paths[1].Leaked, []string{"Proxy-Authorization"}) {
		t.Errorf("forwarded credential: %+v", h)
	}
}

// An external proxy's endpoint.expectedEgress reaches its record, for the reconciler to
// compare with what the echo endpoint saw.
func TestExpectedEgress(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	host, port, _ := net.SplitHostPort(addr)
	doc := fmt.Sprintf(`{"mode":"external","endpoint":{"host":%q,"port":%s,"expectedEgress":"198.51.100.7"}}`, host, port)
	if _, err := e.store.Proxies.Put(context.Background(), "ext", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	h := e.probeNow(e.prober(nil, Config{}), "ext", addr)
	if h.ExpectedEgress != "198.51.100.7" || h.EgressIP != "127.0.0.1" {
		t.Errorf("%+v", h)
	}
	e.putSpec("managed", spec{})
	if h := e.probeNow(e.prober(nil, Config{}), "managed", addr); h.ExpectedEgress != "" {
		t.Errorf("managed: %+v", h)
	}
}

// The echo endpoint mounted under a path of another server, with a query: both paths ask
// for the whole URL and both judge.
func TestEchoBehindAPath(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	mux := http.NewServeMux()
	mux.Handle("/egressd/echo", EchoHandler())
	mux.Handle("/", statusHandler(http.StatusNotFound))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.putSpec("p1", spec{})
	h := e.probeNow(e.prober(nil, Config{DefaultCheckURL: srv.URL + "/egressd/echo?probe=1"}), "p1", addr)
	if !h.Healthy || h.Anonymity != events.AnonymityElite || h.Paths[0].Anonymity != events.AnonymityElite || h.Paths[1].Anonymity != events.AnonymityElite {
		t.Fatalf("%+v", h)
	}
	// With an https default check URL there is no plain-HTTP echo endpoint: the forward path
	// says so and the verdict is the CONNECT path's.
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	h = e.probeNow(e.prober(nil, Config{DefaultCheckURL: tlsSrv.URL + "/egressd/echo", InsecureSkipVerify: true}), "p1", addr)
	if h.Anonymity != events.AnonymityElite || h.Paths[1].Error != errNoForward {
		t.Fatalf("https default: %+v", h)
	}
}
