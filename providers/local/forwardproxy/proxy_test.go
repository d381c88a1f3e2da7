package forwardproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// startProxy serves a proxy on 127.0.0.1 until the test ends and returns its address.
func startProxy(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
	return ln.Addr().String()
}

func proxyClient(proxyAddr string, user *url.Userinfo) *http.Client {
	u := &url.URL{Scheme: "http", Host: proxyAddr, User: user}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
}

// rawRequest writes req on a fresh connection to the proxy and returns the response.
func rawRequest(t *testing.T, proxyAddr, req string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, c, br
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

type seenRequest struct {
	header     http.Header
	remoteAddr string
	body       string
	host       string
	uri        string
}

// recordingServer answers "hello" and records what it was sent.
func recordingServer(t *testing.T, tlsToo bool) (*httptest.Server, func() seenRequest) {
	t.Helper()
	var mu sync.Mutex
	var last seenRequest
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		last = seenRequest{header: r.Header.Clone(), remoteAddr: r.RemoteAddr, body: string(body), host: r.Host, uri: r.RequestURI}
		mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "must not pass")
		io.WriteString(w, "hello")
	})
	var srv *httptest.Server
	if tlsToo {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, func() seenRequest { mu.Lock(); defer mu.Unlock(); return last }
}

func assertNoLeaks(t *testing.T, h http.Header) {
	t.Helper()
	for _, name := range []string{"Via", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip", "Client-Ip", "X-Proxy-Id", "X-Hop"} {
		if v := h.Values(name); len(v) > 0 {
			t.Errorf("upstream saw %s: %q", name, v)
		}
	}
	for name, v := range h {
		if strings.HasPrefix(name, "Proxy-") {
			t.Errorf("upstream saw %s: %q", name, v)
		}
	}
}

func TestForwardPlainHTTP(t *testing.T) {
	upstream, seen := recordingServer(t, false)
	proxy := startProxy(t, Config{})

	req, _ := http.NewRequest("POST", upstream.URL+"/path?q=1", strings.NewReader("payload"))
	req.Header.Set("X-Custom", "kept")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must not pass")
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("Proxy-Custom-Hint", "for the proxy only")
	resp, err := proxyClient(proxy, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("X-Hop") != "" {
		t.Errorf("response headers: %v", resp.Header)
	}
	got := seen()
	if got.body != "payload" || got.uri != "/path?q=1" || got.header.Get("X-Custom") != "kept" {
		t.Errorf("upstream saw %+v", got)
	}
	if ua := got.header.Values("User-Agent"); len(ua) != 1 {
		t.Errorf("User-Agent: %q, want the client's one", ua)
	}
	assertNoLeaks(t, got.header)
}

func TestForwardKeepsMissingUserAgentMissing(t *testing.T) {
	upstream, seen := recordingServer(t, false)
	proxy := startProxy(t, Config{})
	u, _ := url.Parse(upstream.URL)
	resp, _, _ := rawRequest(t, proxy, "GET "+upstream.URL+"/ HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ua := seen().header.Values("User-Agent"); len(ua) != 0 {
		t.Errorf("proxy added User-Agent %q", ua)
	}
}

func TestConnectTunnelTLS(t *testing.T) {
	upstream, seen := recordingServer(t, true)
	proxy := startProxy(t, Config{})

	tr := upstream.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	for range 3 { // several requests over one tunnel
		resp, err := client.Get(upstream.URL + "/secure")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
	}
	assertNoLeaks(t, seen().header)
}

func TestConnectEarlyDataAndHalfClose(t *testing.T) {
	// An upstream that reads everything until EOF, then answers with what it read.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		data, _ := io.ReadAll(c)
		fmt.Fprintf(c, "got %d bytes: %s", len(data), data)
	}()
	proxy := startProxy(t, Config{})

	target := ln.Addr().String()
	// "early" travels in the same write as the CONNECT request.
	resp, c, br := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\nearly")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	io.WriteString(c, "+late")
	c.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != "got 10 bytes: early+late" {
		t.Fatalf("got %q", rest)
	}
}

func TestConnectIdleTimeout(t *testing.T) {
	old := tunnelIdleTimeout
	tunnelIdleTimeout = 300 * time.Millisecond
	t.Cleanup(func() { tunnelIdleTimeout = old })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c) // never says anything
			c.Close()
		}
	}()
	proxy := startProxy(t, Config{})
	target := ln.Addr().String()
	resp, _, br := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	start := time.Now()
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("tunnel ended with %v, want EOF", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("idle tunnel closed after %v", d)
	}
}

func TestBadRequests(t *testing.T) {
	proxy := startProxy(t, Config{})
	for name, req := range map[string]string{
		"origin form":         "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"https absolute form": "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT no port":     "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			resp, _, _ := rawRequest(t, proxy, req)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
		})
	}
}

func TestUnreachableUpstream(t *testing.T) {
	proxy := startProxy(t, Config{})
	dead := closedPort(t)
	t.Run("CONNECT", func(t *testing.T) {
		resp, _, _ := rawRequest(t, proxy, "CONNECT "+dead+" HTTP/1.1\r\nHost: "+dead+"\r\n\r\n")
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502", resp.StatusCode)
		}
	})
	t.Run("GET", func(t *testing.T) {
		resp, err := proxyClient(proxy, nil).Get("http://" + dead + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502", resp.StatusCode)
		}
	})
}

func TestUpstreamTimeout(t *testing.T) {
	old := responseTimeout
	responseTimeout = 200 * time.Millisecond
	t.Cleanup(func() { responseTimeout = old })

	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	proxy := startProxy(t, Config{})
	resp, err := proxyClient(proxy, nil).Get(slow.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("status %d, want 504", resp.StatusCode)
	}
}

func TestSourceAddress(t *testing.T) {
	upstream, seen := recordingServer(t, false)
	proxy := startProxy(t, Config{Source: "127.0.0.3"})
	resp, err := proxyClient(proxy, nil).Get(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if host, _, _ := net.SplitHostPort(seen().remoteAddr); host != "127.0.0.3" {
		t.Errorf("upstream saw the request from %s, want 127.0.0.3", seen().remoteAddr)
	}

	// And through a tunnel.
	u, _ := url.Parse(upstream.URL)
	resp, c, br := rawRequest(t, proxy, "CONNECT "+u.Host+" HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	io.WriteString(c, "GET /t HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if host, _, _ := net.SplitHostPort(seen().remoteAddr); host != "127.0.0.3" {
		t.Errorf("upstream saw the tunnel from %s, want 127.0.0.3", seen().remoteAddr)
	}
}

func TestServeStopsWithOpenTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		c, err := up.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Config{}) }()

	target := up.Addr().String()
	resp, _, br := rawRequest(t, ln.Addr().String(), "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(shutdownBudget + 5*time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("tunnel not closed cleanly: %v", err)
	}
}

func TestRequestLogHasNoCredentials(t *testing.T) {
	upstream, _ := recordingServer(t, false)
	authFile := t.TempDir() + "/auth"
	if err := WriteAuthFile(authFile, "crawler", "s3cret-pass"); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	proxy := startProxy(t, Config{AuthFile: authFile, Logger: log})
	resp, err := proxyClient(proxy, url.UserPassword("crawler", "s3cret-pass")).Get(upstream.URL + "/p")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	out := buf.String()
	u, _ := url.Parse(upstream.URL)
	if !strings.Contains(out, "method=GET") || !strings.Contains(out, "host="+u.Host) || !strings.Contains(out, "status=200") {
		t.Errorf("no request line in log:\n%s", out)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("crawler:s3cret-pass"))
	if strings.Contains(out, "s3cret-pass") || strings.Contains(out, basic) {
		t.Errorf("log leaks the credential:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
