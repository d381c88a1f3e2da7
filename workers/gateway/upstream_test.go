package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"
)

// scriptedProxy is a fleet proxy on loopback that answers the requests it reads with exactly
// the bytes a test gives (what a proxy sends is the point of these tests), and records them.
type scriptedProxy struct {
	ln      net.Listener
	answer  func(n int) (raw string, hangUp bool) // the n-th request's answer, from 0
	mu      sync.Mutex
	reqs    []*http.Request
	accepts int
	wg      sync.WaitGroup
}

func startScriptedProxy(t *testing.T, answer func(n int) (string, bool)) *scriptedProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedProxy{ln: ln, answer: answer}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *scriptedProxy) serve() {
	defer p.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		p.mu.Unlock()
		conns = append(conns, c)
		p.wg.Add(1)
		go p.conn(c)
	}
}

func (p *scriptedProxy) conn(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		p.mu.Lock()
		n := len(p.reqs)
		p.reqs = append(p.reqs, req)
		p.mu.Unlock()
		raw, hangUp := p.answer(n)
		if raw != "" {
			if _, err := io.WriteString(c, raw); err != nil {
				return
			}
		}
		if hangUp {
			return
		}
	}
}

func (p *scriptedProxy) counts() (accepts, reqs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts, len(p.reqs)
}

func getThrough(t *testing.T, u *upstreams, addr string) (*http.Response, error) {
	t.Helper()
	target, _ := url.Parse("http://site.example/page")
	req := &http.Request{Method: "GET", URL: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"User-Agent": {""}}, Host: target.Host}
	return u.roundTrip(context.Background(), addr, req)
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// Two requests in a row through a kept connection: what each kind of answer leaves for the
// next request, and that the answer comes through whole.
func TestUpstreamsKeepAndRetire(t *testing.T) {
	for _, c := range []struct {
		name    string
		raw     string
		hangUp  bool // the proxy closes the connection after answering, saying nothing
		accepts int  // connections the two requests took
	}{
		{name: "kept alive", raw: okAnswer, accepts: 1},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", accepts: 1},
		{name: "informational answers skipped", raw: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + okAnswer, accepts: 1},
		{name: "Connection: close", raw: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", accepts: 2},
		{name: "HTTP/1.0", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", accepts: 2},
		{name: "more than announced", raw: okAnswer + "HTTP/1.1 200 OK\r\n", accepts: 2},
		{name: "body until the end", raw: "HTTP/1.1 200 OK\r\n\r\nok", hangUp: true, accepts: 2},
		// The proxy drops a kept connection (its idle timeout): the next request is sent
		// again on a new one, which the crawler never sees.
		{name: "closed by the proxy while kept", raw: okAnswer, hangUp: true, accepts: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startScriptedProxy(t, func(int) (string, bool) { return c.raw, c.hangUp })
			u := newUpstreams(&net.Dialer{})
			defer u.closeAll()
			for i := range 2 {
				resp, err := getThrough(t, u, p.ln.Addr().String())
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "ok" || err != nil {
					t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, b, err)
				}
			}
			if accepts, _ := p.counts(); accepts != c.accepts {
				t.Errorf("%d connections, want %d", accepts, c.accepts)
			}
		})
	}
}

// waitRequests waits until the proxy has read n requests.
func waitRequests(t *testing.T, p *scriptedProxy, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, r := p.counts(); r == n {
			return
		}
	}
	t.Fatal("the proxy got no request")
}

// The request leaves as a proxy request: absolute form, the lease's credentials, no hop or
// Proxy-* header of the crawler's, no User-Agent of net/http's.
func TestSendWritesAProxyRequest(t *testing.T) {
	p := startScriptedProxy(t, func(int) (string, bool) { return okAnswer, false })
	g := &Gateway{upstreams: newUpstreams(&net.Dialer{})}
	defer g.upstreams.closeAll()
	in, _ := http.NewRequest("GET", "http://site.example/a?b=c", nil)
	in.Header = http.Header{"Proxy-Authorization": {"Basic Y3Jhd2xlcg=="}, "Proxy-Connection": {"keep-alive"},
		"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Accept": {"text/html"}}
	up := &upstream{url: &url.URL{Host: p.ln.Addr().String()}, basicAuth: "Basic ZmxlZXQ6cHc="}
	resp, err := g.send(in, up)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	p.mu.Lock()
	got := p.reqs[0]
	p.mu.Unlock()
	if got.RequestURI != "http://site.example/a?b=c" {
		t.Errorf("request target %q", got.RequestURI)
	}
	want := http.Header{"Proxy-Authorization": {"Basic ZmxlZXQ6cHc="}, "Accept": {"text/html"}}
	if len(got.Header) != len(want) || got.Header.Get("Proxy-Authorization") != want.Get("Proxy-Authorization") ||
		got.Header.Get("Accept") != "text/html" {
		t.Errorf("headers %v, want %v", got.Header, want)
	}
	if !replayable(in) {
		t.Error("a GET without a body is not replayable")
	}
}

func TestReplayable(t *testing.T) {
	for _, c := range []struct {
		method string
		length int64
		header http.Header
		want   bool
	}{
		{"GET", 0, nil, true}, {"HEAD", 0, nil, true}, {"OPTIONS", 0, nil, true}, {"TRACE", 0, nil, true},
		{"GET", 10, nil, false}, {"GET", -1, nil, false}, {"POST", 0, nil, false}, {"DELETE", 0, nil, false},
		{"POST", 0, http.Header{"Idempotency-Key": {"k"}}, true}, {"PUT", 0, http.Header{"X-Idempotency-Key": {"k"}}, true},
		{"POST", 5, http.Header{"Idempotency-Key": {"k"}}, false},
	} {
		r := &http.Request{Method: c.method, ContentLength: c.length, Header: c.header}
		if got := replayable(r); got != c.want {
			t.Errorf("%s length %d %v: %v, want %v", c.method, c.length, c.header, got, c.want)
		}
	}
}

// What goes wrong on the way: each failure is told apart the way the Transport's were (the
// gateway's rules judge them), and the connection is never kept after one.
func TestUpstreamsFailures(t *testing.T) {
	t.Run("no proxy listening", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		_, err := getThrough(t, newUpstreams(&net.Dialer{}), addr)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "proxyconnect" {
			t.Errorf("got %v, want a proxyconnect error", err)
		}
	})
	t.Run("no answer in time", func(t *testing.T) {
		p := startScriptedProxy(t, func(int) (string, bool) { return "", false })
		u := newUpstreams(&net.Dialer{})
		u.headerTimeout = 50 * time.Millisecond
		_, err := getThrough(t, u, p.ln.Addr().String())
		if !isTimeout(err) {
			t.Errorf("got %v, want a timeout", err)
		}
		if _, reqs := p.counts(); reqs != 1 {
			t.Errorf("sent %d times, want once (a proxy that is slow got it)", reqs)
		}
	})
	t.Run("the crawler goes away while waiting", func(t *testing.T) {
		p := startScriptedProxy(t, func(int) (string, bool) { return "", false })
		u := newUpstreams(&net.Dialer{})
		ctx, cancel := context.WithCancel(context.Background())
		target, _ := url.Parse("http://site.example/")
		errc := make(chan error, 1)
		go func() {
			_, err := u.roundTrip(ctx, p.ln.Addr().String(), &http.Request{Method: "GET", URL: target, Header: http.Header{}})
			errc <- err
		}()
		waitRequests(t, p, 1)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
	t.Run("the crawler goes away during the body", func(t *testing.T) {
		p := startScriptedProxy(t, func(int) (string, bool) { return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", false })
		u := newUpstreams(&net.Dialer{})
		defer u.closeAll()
		ctx, cancel := context.WithCancel(context.Background())
		target, _ := url.Parse("http://site.example/")
		resp, err := u.roundTrip(ctx, p.ln.Addr().String(), &http.Request{Method: "GET", URL: target, Header: http.Header{}})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Error("the body's read went on after the request's end")
		}
		resp.Body.Close()
		if len(u.idle) != 0 {
			t.Error("a cut connection was kept")
		}
	})
	t.Run("a body not read to its end", func(t *testing.T) {
		p := startScriptedProxy(t, func(int) (string, bool) { return okAnswer, false })
		u := newUpstreams(&net.Dialer{})
		defer u.closeAll()
		resp, err := getThrough(t, u, p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(u.idle) != 0 {
			t.Error("a connection with an answer left in it was kept")
		}
	})
}

// Kept connections are closed after upstreamIdleTimeout unused, and all of them at shutdown,
// after which none is kept.
func TestUpstreamsReapAndClose(t *testing.T) {
	p := startScriptedProxy(t, func(int) (string, bool) { return okAnswer, false })
	u := newUpstreams(&net.Dialer{})
	addr := p.ln.Addr().String()
	var conns []*upConn
	for range 3 {
		c, _, err := u.get(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	now := time.Now()
	for i, c := range conns {
		c.idleSince = now.Add(-upstreamIdleTimeout + time.Duration(i-1)*time.Second) // two are too old
		if !u.put(c) {
			t.Fatal("not kept")
		}
	}
	u.reap(now)
	if got := u.idle[addr]; len(got) != 1 || got[0] != conns[2] {
		t.Fatalf("kept %d after the reap, want the youngest", len(got))
	}
	if _, err := conns[0].Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a reaped connection reads %v", err)
	}
	u.closeAll()
	if _, err := conns[2].Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after closeAll a kept connection reads %v", err)
	}
	c, _, _ := u.get(context.Background(), addr)
	if u.put(c) {
		t.Error("a connection was kept after closeAll")
	}
	c.Close()
}

// BenchmarkKeptConnectionMemory keeps 64 connections to one proxy open between requests,
// through net/http's Transport (what plain HTTP used before) and through the gateway's own
// upstreams, and reports the heap and goroutine stacks each kept connection holds, and its
// goroutines (the whole process: the proxy's side of a connection, one goroutine, is in both,
// so the difference is the gateway's).
func BenchmarkKeptConnectionMemory(b *testing.B) {
	const n = 64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	// The proxy answers once all n requests are in, so n connections are open.
	var release chan struct{}
	var arrived sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
		_, _ = io.WriteString(w, "ok")
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	addr := ln.Addr().String()
	target, _ := url.Parse("http://site.example/")
	proxyURL := &url.URL{Scheme: "http", Host: addr}
	for _, via := range []string{"transport", "upstreams"} {
		b.Run(via, func(b *testing.B) {
			for b.Loop() {
				tr := newTransport(&net.Dialer{})
				u := newUpstreams(&net.Dialer{})
				before, g0 := inUseNow()
				arrived.Add(n)
				release = make(chan struct{})
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req := &http.Request{Method: "GET", URL: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
							Header: http.Header{}, Host: target.Host}
						var resp *http.Response
						var err error
						if via == "transport" {
							resp, err = tr.RoundTrip(req.WithContext(context.WithValue(context.Background(), proxyKey{}, proxyURL)))
						} else {
							resp, err = u.roundTrip(context.Background(), addr, req)
						}
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}()
				}
				arrived.Wait()
				close(release)
				wg.Wait()
				after, g1 := inUseNow()
				b.ReportMetric(float64(after-before)/n/1024, "KiB/conn")
				b.ReportMetric(float64(g1-g0)/n, "goroutines/conn")
				tr.CloseIdleConnections()
				u.closeAll()
			}
		})
	}
}

func inUseNow() (uint64, int) {
	time.Sleep(50 * time.Millisecond) // the last reads park
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, runtime.NumGoroutine()
}
