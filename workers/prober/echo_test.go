package prober

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestEchoHandler(t *testing.T) {
	srv := httptest.NewServer(EchoHandler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/anything", nil)
	req.Header.Set("Via", "1.1 squid")
	req.Header.Add("X-Forwarded-For", "10.0.0.1")
	req.Header.Add("X-Forwarded-For", "10.0.0.2")
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if strings.Contains(string(body), "c2VjcmV0") {
		t.Errorf("credential echoed: %s", body)
	}
	r, ok := decodeEcho(resp.Header.Get("Content-Type"), body)
	if !ok || r.IP != "127.0.0.1" || !strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") {
		t.Fatalf("decode %v: %s", ok, body)
	}
	if !slices.Equal(r.Headers["X-Forwarded-For"], []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("headers %v", r.Headers)
	}
	if got := r.leaked(); !slices.Equal(got, []string{"Via", "X-Forwarded-For", "Proxy-Authorization"}) {
		t.Errorf("leaked %v", got)
	}

	resp, err = srv.Client().Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

func TestServeEchoStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeEcho(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(echoShutdownBudget + time.Second):
		t.Fatal("ServeEcho did not stop")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("still listening")
	}
}

func TestDecodeEcho(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		ok             bool
		ip             string
	}{
		{"echo", "application/json", `{"v":1,"ip":"127.0.0.1","headers":{}}`, true, "127.0.0.1"},
		{"charset", "application/json; charset=utf-8", `{"v":1,"ip":"::ffff:10.0.0.1"}`, true, "10.0.0.1"},
		{"html", "text/html", `{"v":1,"ip":"127.0.0.1"}`, false, ""},
		{"other json", "application/json", `{"status":"ok"}`, false, ""},
		{"newer version", "application/json", `{"v":2,"ip":"127.0.0.1"}`, false, ""},
		{"bad ip", "application/json", `{"v":1,"ip":"localhost"}`, false, ""},
		{"truncated", "application/json", `{"v":1,"ip":"127.0.0.1"`, false, ""},
	} {
		r, ok := decodeEcho(tc.ct, []byte(tc.body))
		if ok != tc.ok || r.IP != tc.ip {
			t.Errorf("%s: %v %q", tc.name, ok, r.IP)
		}
	}
}

func FuzzDecodeEcho(f *testing.F) {
	f.Add([]byte(`{"v":1,"remoteAddr":"127.0.0.1:5","ip":"127.0.0.1","headers":{"via":["x"],"Forwarded":[]}}`))
	f.Add([]byte(`{"v":1,"ip":"::1","headers":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"v":1,"ip":"10.0.0.1","headers":{"X-Forwarded-For":["127.0.0.1, 10.0.0.2"],"forwarded":["for=\"[::ffff:127.0.0.1]:80\""]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, ok := decodeEcho("application/json", body)
		if !ok {
			return
		}
		if r.V != 1 || net.ParseIP(r.IP) == nil {
			t.Fatalf("accepted %+v", r)
		}
		for _, h := range r.leaked() {
			if !slices.Contains(leakHeaders, h) {
				t.Fatalf("leaked %q", h)
			}
		}
		// The verdict names only headers the reply has, and is one of the three.
		leaked, a := r.judge(netip.MustParseAddr("127.0.0.1"))
		if !slices.Contains(events.Anonymities, a) {
			t.Fatalf("verdict %q", a)
		}
		for _, h := range leaked {
			if !slices.ContainsFunc(slices.Collect(maps.Keys(r.Headers)), func(k string) bool { return strings.EqualFold(k, h) }) {
				t.Fatalf("leaked %q, not in %v", h, r.Headers)
			}
		}
		// What the prober keeps from an echo survives a round trip.
		b, _ := json.Marshal(r)
		if r2, ok := decodeEcho("application/json", b); !ok || r2.IP != r.IP || !slices.Equal(r2.leaked(), r.leaked()) {
			t.Fatalf("round trip %+v → %+v", r, r2)
		}
	})
}
