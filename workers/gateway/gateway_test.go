package gateway_test

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/gateway"
)

// get fetches u and returns the status, the Proxy-Status and the body.
func get(t *testing.T, c *http.Client, u string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Proxy-Status"), string(b)
}

// Plain HTTP and HTTPS through CONNECT leave through the fleet's proxies, with the proxies'
// credentials added by the gateway; the origin sees only the proxies' sources.
func TestGatewayFetchesThroughTheFleet(t *testing.T) {
	r := newRig(t, 3)
	gw, _ := r.gateway(nil)
	c := r.client(gw, "crawler-7-pool-web-geo-de", testToken)
	for _, o := range []*origin{r.origin, r.tlsOrig} {
		code, _, body := get(t, c, o.url+"/page")
		if code != http.StatusOK || !strings.HasPrefix(body, "hello 127.0.61.") {
			t.Fatalf("GET %s through the gateway: %d %q", o.url, code, body)
		}
		for _, src := range o.sources() {
			if r.sources[src] == "" {
				t.Errorf("%s saw a request from %s, no fleet proxy", o.url, src)
			}
		}
	}
	// A tunnel is counted when it ends, once the client has closed it.
	eventually(t, 10*time.Second, "both requests counted", func() bool {
		return r.obs.count("crawler-7/web/http/ok") == 1 && r.obs.count("crawler-7/web/connect/ok") == 1
	})
}

// Every method and body goes through: those that may be sent again on the gateway's own kept
// connections, the others (a body, a POST) through net/http's Transport.
func TestGatewayForwardsMethodsAndBodies(t *testing.T) {
	r := newRig(t, 1)
	gw, _ := r.gateway(nil)
	c := r.client(gw, "crawler-7", testToken)
	for _, tc := range []struct {
		method, body string
		chunked      bool
		header       http.Header
		want         string
	}{
		{method: "GET", want: "GET "},
		{method: "HEAD", want: ""},
		{method: "OPTIONS", want: "OPTIONS "},
		{method: "POST", body: "a=1", want: "POST a=1"},
		{method: "POST", want: "POST "},
		{method: "POST", body: "streamed", chunked: true, want: "POST streamed"},
		{method: "PUT", header: http.Header{"Idempotency-Key": {"k1"}}, want: "PUT "},
		{method: "DELETE", want: "DELETE "},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
		}
		req, _ := http.NewRequest(tc.method, r.origin.url+"/echo", body)
		for k, v := range tc.header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.method, tc.body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != tc.want {
			t.Errorf("%s %q: %d %q, want %q", tc.method, tc.body, resp.StatusCode, b, tc.want)
		}
	}
}

// A wrong token is a 407 saying why; a bad username key a 400 naming the key; both with
// Proxy-Status. Neither leases anything.
func TestGatewayRefusesBadCredentialsAndKeys(t *testing.T) {
	r := newRig(t, 1)
	gw, _ := r.gateway(nil)
	code, ps, body := get(t, r.client(gw, "crawler-7", "wrong"), r.origin.url)
	if code != http.StatusProxyAuthRequired || !strings.Contains(ps, "error=http_request_denied") || !strings.Contains(body, "not a known crawler token") {
		t.Errorf("wrong token: %d %q %q", code, ps, body)
	}
	code, ps, body = get(t, r.client(gw, "crawler-7-colour-red", testToken), r.origin.url)
	if code != http.StatusBadRequest || !strings.Contains(ps, `\"colour\"`) || !strings.Contains(body, `"colour": unknown key`) {
		t.Errorf("bad key: %d %q %q", code, ps, body)
	}
	// Through CONNECT the crawler sees the status (curl: "CONNECT tunnel failed, response 400").
	_, err := r.client(gw, "crawler-7-colour-red", testToken).Get(r.tlsOrig.url)
	if err == nil || !strings.Contains(err.Error(), "Bad Request") {
		t.Errorf("bad key over CONNECT: %v", err)
	}
	if n := r.held(); n != 0 {
		t.Errorf("%d leases held after refusals", n)
	}
	if r.obs.count("/"+"/http/unauthorized") != 1 || r.obs.count("crawler-7//http/refused") != 1 {
		t.Errorf("metrics: %v", r.obs.seen)
	}
}

// Without a session, requests spread over the fleet, one lease per proxy held and reused.
func TestGatewaySpreadsRotatingRequests(t *testing.T) {
	r := newRig(t, 4)
	gw, _ := r.gateway(nil)
	c := r.client(gw, "crawler-7", testToken)
	for range 40 {
		if code, _, body := get(t, c, r.origin.url); code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
	}
	per := map[string]int{}
	for _, src := range r.origin.sources() {
		per[r.sources[src]]++
	}
	for _, p := range r.proxies {
		if per[p] < 5 {
			t.Errorf("proxy %s carried %d of 40 requests: %v", p, per[p], per)
		}
	}
	if n := r.held(); n != 4 {
		t.Errorf("%d leases held, want one per proxy (4)", n)
	}
}

// A 429 from the origin to one proxy is reported blocked for the target (a cooldown in KV),
// the idempotent request is answered through another proxy, and no later request goes
// through the blocked one.
func TestGatewayReportsABlockAndMovesOn(t *testing.T) {
	r := newRig(t, 3)
	gw, _ := r.gateway(nil)
	c := r.client(gw, "crawler-7", testToken)
	if code, _, _ := get(t, c, r.origin.url); code != http.StatusOK {
		t.Fatal(code)
	}
	first := r.origin.sources()[0]
	r.origin.mu.Lock()
	r.origin.block[first] = true
	r.origin.mu.Unlock()
	for range 9 {
		if code, _, body := get(t, c, r.origin.url); code != http.StatusOK {
			t.Fatalf("a request was not retried past the block: %d %s", code, body)
		}
	}
	seen := r.origin.sources()
	if got := slices.Index(seen[1:], first); got < 0 {
		t.Fatalf("the blocked proxy was never tried: %v", seen)
	}
	blockedAt := slices.Index(seen[1:], first) + 1
	if slices.Contains(seen[blockedAt+1:], first) {
		t.Errorf("a request went through the blocked proxy again: %v", seen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := r.store.Cooldowns.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var cooling []string
	for k := range keys.Keys() {
		cooling = append(cooling, k)
	}
	target := strings.TrimSuffix(strings.TrimPrefix(r.origin.url, "http://"), ":"+r.origin.url[strings.LastIndex(r.origin.url, ":")+1:])
	want := r.sources[first] + "." + base64.RawURLEncoding.EncodeToString([]byte(target))
	if !slices.Contains(cooling, want) {
		t.Errorf("cooldowns %v, want %s (blocked for %s)", cooling, want, target)
	}
	if r.obs.count("crawler-7//http/ok") != 10 || r.obs.count("hit/crawler-7//blocked") != 1 {
		t.Errorf("metrics: %v", r.obs.seen)
	}
}

// A session keeps every request on one proxy, across two gateway replicas and a restart of
// one; a strict session whose proxy is blocked on the target answers 503 with the reason.
func TestGatewaySessionsStickAcrossReplicas(t *testing.T) {
	r := newRig(t, 4)
	gwA, stopA := r.gateway(nil)
	gwB, _ := r.gateway(nil)
	user := "crawler-7-session-s1-ttl-300"
	for i := range 12 {
		gw := gwA
		if i%2 == 1 {
			gw = gwB
		}
		if i == 6 {
			stopA()
			gwA, _ = r.gateway(nil)
			gw = gwA
		}
		if code, _, body := get(t, r.client(gw, user, testToken), r.origin.url); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	seen := r.origin.sources()
	for _, s := range seen {
		if s != seen[0] {
			t.Fatalf("the session moved: %v", seen)
		}
	}
	t.Run("strict, blocked", func(t *testing.T) {
		strict := "crawler-7-session-s2-sticky-strict"
		c := r.client(gwB, strict, testToken)
		if code, _, _ := get(t, c, r.origin.url); code != http.StatusOK {
			t.Fatal(code)
		}
		all := r.origin.sources()
		src := all[len(all)-1]
		r.origin.mu.Lock()
		r.origin.block[src] = true
		r.origin.mu.Unlock()
		if code, _, _ := get(t, c, r.origin.url); code != http.StatusTooManyRequests {
			t.Fatalf("a session's rule hit is passed on, not retried elsewhere: %d", code)
		}
		code, ps, body := get(t, c, r.origin.url)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "stickyMode strict") || !strings.Contains(ps, "error=proxy_internal_response") {
			t.Errorf("strict session after a block: %d %q %q", code, ps, body)
		}
	})
}

// A soft session blocked on its target moves to another proxy for its next request.
func TestGatewaySoftSessionMovesAfterABlock(t *testing.T) {
	r := newRig(t, 2)
	gw, _ := r.gateway(nil)
	c := r.client(gw, "crawler-7-session-s3", testToken)
	if code, _, _ := get(t, c, r.origin.url); code != http.StatusOK {
		t.Fatal(code)
	}
	src := r.origin.sources()[0]
	r.origin.mu.Lock()
	r.origin.block[src] = true
	r.origin.mu.Unlock()
	if code, _, _ := get(t, c, r.origin.url); code != http.StatusTooManyRequests {
		t.Fatalf("the rule hit is passed on: %d", code)
	}
	code, _, body := get(t, c, r.origin.url)
	if code != http.StatusOK || strings.Contains(body, src) {
		t.Errorf("the soft session did not move: %d %s\n%s", code, body, r.logs.String())
	}
}

// Leases go back once idle, and at shutdown.
func TestGatewayReleasesIdleLeases(t *testing.T) {
	r := newRig(t, 2)
	gw, stop := r.gateway(func(c *gateway.Config) { c.IdleRelease = 300 * time.Millisecond })
	if code, _, _ := get(t, r.client(gw, "crawler-7", testToken), r.origin.url); code != http.StatusOK {
		t.Fatal(code)
	}
	eventually(t, 10*time.Second, "the idle lease released", func() bool { return r.held() == 0 })
	gw2, stop2 := r.gateway(nil)
	if code, _, _ := get(t, r.client(gw2, "crawler-7-session-x", testToken), r.origin.url); code != http.StatusOK {
		t.Fatal(code)
	}
	if r.held() != 1 {
		t.Fatalf("%d held", r.held())
	}
	stop2()
	stop()
	if n := r.held(); n != 0 {
		t.Errorf("%d leases held after the gateways stopped", n)
	}
}

// No answer, header, log line or metric of the gateway carries a fleet proxy's password, even
// when the proxy fails.
func TestGatewayNeverLeaksProxyCredentials(t *testing.T) {
	r := newRig(t, 1)
	gw, _ := r.gateway(func(c *gateway.Config) { c.InfoHeaders = true })
	c := r.client(gw, "crawler-7", testToken)
	var all strings.Builder
	dump := func(resp *http.Response) {
		for k, v := range resp.Header {
			all.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		b, _ := io.ReadAll(resp.Body)
		all.Write(b)
		resp.Body.Close()
	}
	resp, err := c.Get(r.origin.url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Egressd-Proxy") != "px-0" {
		t.Errorf("info headers: %v", resp.Header)
	}
	dump(resp)
	// The origin goes away: the proxy answers 502, the CONNECT fails.
	ln, _ := net.Listen("tcp", "127.0.61.1:0")
	dead := ln.Addr().String()
	ln.Close()
	for _, u := range []string{"http://" + dead + "/", "https://" + dead + "/"} {
		if resp, err := c.Get(u); err == nil {
			dump(resp)
		} else {
			all.WriteString(err.Error())
		}
	}
	all.WriteString(r.logs.String())
	all.WriteString(strings.Join(r.obs.seen, "\n"))
	if strings.Contains(all.String(), proxySecret) || strings.Contains(all.String(), base64.StdEncoding.EncodeToString([]byte("fleet:"+proxySecret))) {
		t.Errorf("the fleet's password leaked:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "gateway: rule hit") {
		t.Errorf("no failure was provoked:\n%s", all.String())
	}
	_ = events.ReportBlocked
}
