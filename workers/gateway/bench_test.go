package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/workers/gateway"
	"github.com/nats-io/nats.go"
)

// BenchmarkGatewayVsDirect measures a request through the gateway against the same request
// sent directly through the same leased proxy (the baseline, in the same run), to the same
// origin: plain HTTP and CONNECT+TLS (a new tunnel and handshake per request) with 64
// concurrent clients, p50 latency, throughput and CPU per request; the same with one client
// (the latency the extra hop adds when the CPUs are not saturated); and a 100 MB download
// through CONNECT. The ratios are in docs/performance.md. Run the plain case with enough
// requests to pass the warm-up (-benchtime 10000x); each case opens fresh connections, so
// keep it to one run at a time.
func BenchmarkGatewayVsDirect(b *testing.B) {
	r, direct, gateway := benchPaths(b)
	via := map[string]*url.URL{"direct": direct, "gateway": gateway}
	cases := []struct {
		name      string
		url       string
		keepAlive bool
		clients   int
	}{
		{"plain", r.origin.url + "/", true, 64},
		{"connect-tls", r.tlsOrig.url + "/", false, 64},
		{"plain-1client", r.origin.url + "/", true, 1},
		{"connect-tls-1client", r.tlsOrig.url + "/", false, 1},
	}
	for _, c := range cases {
		for _, path := range []string{"direct", "gateway"} {
			b.Run(c.name+"/"+path, func(b *testing.B) { benchClients(b, r, via[path], c.url, c.keepAlive, c.clients) })
		}
	}
	for _, path := range []string{"direct", "gateway"} {
		b.Run("bulk-100MB/"+path, func(b *testing.B) {
			c := benchClient(r, via[path], true)
			b.SetBytes(bulkBytes)
			cpu0 := cpuTime(b)
			for b.Loop() {
				fetch(b, c, r.tlsOrig.url+"/bulk")
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// benchPaths starts a rig with one proxy that binds no source port, a gateway, and a lease
// of the benchmark's own on that proxy: the two ways to the same proxy.
func benchPaths(b *testing.B) (r *rig, direct, gateway *url.URL) {
	r = newRigSources(b, []string{""})
	// No observer: the rig's records every request, which a benchmark's thousands would
	// measure instead of the gateway.
	gw, _ := r.gateway(func(c *gatewayConfig) { c.IdleRelease, c.Observer = time.Hour, nil })
	nc, err := nats.Connect(r.srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	lease, err := client.New(nc).Acquire(context.Background(), client.AcquireOptions{Holder: "bench", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lease.Release(context.Background()) })
	direct, _ = url.Parse(lease.URL)
	return r, direct, &url.URL{Scheme: "http", Host: gw, User: url.UserPassword("crawler-7", testToken)}
}

func benchClient(r *rig, proxy *url.URL, keepAlive bool) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: r.caPool}, DisableKeepAlives: !keepAlive,
		MaxIdleConnsPerHost: 64}
	r.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

func fetch(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// benchClients runs clients concurrent clients (64 is 32 per CPU on 2 CPUs:
// SetParallelism(64/GOMAXPROCS)) and reports the p50 latency beside ns/op (the inverse of
// throughput), and the CPU time the process spent per request (clients, gateway, proxy,
// origin and leaser together: the gateway's own share is the difference from direct; on a
// machine shared with other work it varies far less than the wall times).
func benchClients(b *testing.B, r *rig, proxy *url.URL, u string, keepAlive bool, clients int) {
	var mu sync.Mutex
	var lat []time.Duration
	run := func(next func() bool) {
		c := benchClient(r, proxy, keepAlive)
		var mine []time.Duration
		for next() {
			start := time.Now()
			fetch(b, c, u)
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	}
	cpu0 := cpuTime(b)
	b.ResetTimer()
	if clients == 1 {
		run(b.Loop)
	} else {
		b.SetParallelism(max(clients/runtimeProcs(), 1))
		b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	}
}

type gatewayConfig = gateway.Config

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkIdleTunnelMemory opens 200 CONNECT tunnels and leaves them idle, directly through
// the leased proxy and through the gateway, and reports the heap and stacks each tunnel holds
// (the whole process: the proxy's side of a tunnel is in both, so the gateway's own share is
// the difference).
func BenchmarkIdleTunnelMemory(b *testing.B) {
	r, direct, gateway := benchPaths(b)
	target := strings.TrimPrefix(r.origin.url, "http://")
	for _, c := range []struct {
		name  string
		proxy *url.URL
	}{{"direct", direct}, {"gateway", gateway}} {
		b.Run(c.name, func(b *testing.B) {
			const n = 200
			for b.Loop() {
				before := inUse()
				conns := make([]net.Conn, 0, n)
				for range n {
					conns = append(conns, openTunnel(b, c.proxy, target))
				}
				after := inUse()
				for _, conn := range conns {
					conn.Close()
				}
				b.ReportMetric(float64(after-before)/n/1024, "KiB/tunnel")
			}
		})
	}
}

// openTunnel sends CONNECT through proxy and waits for the 200.
func openTunnel(b *testing.B, proxy *url.URL, target string) net.Conn {
	conn, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		b.Fatal(err)
	}
	pass, _ := proxy.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(proxy.User.Username() + ":" + pass))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	return conn
}

// inUse is the heap and goroutine stacks in use after a collection.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkSessionMemory holds 200 sessions, each opened by one CONNECT through the gateway
// and left without traffic, against the same 200 sticky leases taken directly with the Go
// client, and reports the heap and stacks each holds (the whole process: the lease's share in
// NATS and the leaser, and its renewal, are in both, so the gateway's own share is the
// difference).
func BenchmarkSessionMemory(b *testing.B) {
	r := newRigLeases(b, []string{""}, 512)
	gw, _ := r.gateway(func(c *gatewayConfig) { c.IdleRelease, c.Observer, c.LeaseTTL = time.Hour, nil, time.Hour })
	nc, err := nats.Connect(r.srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	lc := client.New(nc)
	target := strings.TrimPrefix(r.origin.url, "http://")
	const n = 200
	b.Run("direct", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			before := settledInUse()
			leases := make([]*client.Lease, 0, n)
			for j := range n {
				l, err := lc.Acquire(context.Background(), client.AcquireOptions{Holder: "bench", TTL: time.Hour,
					Sticky: fmt.Sprintf("bench/d%d-%d", i, j), Session: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				leases = append(leases, l)
			}
			after := settledInUse()
			for _, l := range leases {
				_ = l.Release(context.Background())
			}
			b.ReportMetric(float64(after-before)/n/1024, "KiB/session")
		}
	})
	b.Run("gateway", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			before := settledInUse()
			for j := range n {
				u := &url.URL{Scheme: "http", Host: gw, User: url.UserPassword(fmt.Sprintf("crawler-7-session-g%dx%d", i, j), testToken)}
				openTunnel(b, u, target).Close()
			}
			after := settledInUse()
			b.ReportMetric(float64(after-before)/n/1024, "KiB/session")
		}
	})
}

// settledInUse is inUse once the number of goroutines has stopped changing (tunnels just
// closed end a moment later).
func settledInUse() uint64 {
	for last, still := -1, 0; still < 10; {
		if n := runtime.NumGoroutine(); n == last {
			still++
		} else {
			last, still = n, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	return inUse()
}
