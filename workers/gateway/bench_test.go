package gateway_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
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
// concurrent clients, p50 latency and throughput; and a 100 MB download through CONNECT.
// The ratios are in docs/performance.md. Run the plain case with enough requests to pass the
// warm-up (-benchtime 10000x); each case opens fresh connections, so keep it to one run at a
// time.
func BenchmarkGatewayVsDirect(b *testing.B) {
	r := newRigSources(b, []string{""})
	gw, _ := r.gateway(func(c *gatewayConfig) { c.IdleRelease = time.Hour })
	nc, err := nats.Connect(r.srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	lease, err := client.New(nc).Acquire(context.Background(), client.AcquireOptions{Holder: "bench", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer lease.Release(context.Background())
	direct, _ := url.Parse(lease.URL)
	via := map[string]*url.URL{"direct": direct, "gateway": {Scheme: "http", Host: gw, User: url.UserPassword("crawler-7", testToken)}}
	for _, path := range []string{"direct", "gateway"} {
		b.Run("plain/"+path, func(b *testing.B) { benchConcurrent(b, r, via[path], r.origin.url+"/", true) })
	}
	for _, path := range []string{"direct", "gateway"} {
		b.Run("connect-tls/"+path, func(b *testing.B) { benchConcurrent(b, r, via[path], r.tlsOrig.url+"/", false) })
	}
	for _, path := range []string{"direct", "gateway"} {
		b.Run("bulk-100MB/"+path, func(b *testing.B) {
			c := benchClient(r, via[path], true)
			b.SetBytes(bulkBytes)
			for b.Loop() {
				fetch(b, c, r.tlsOrig.url+"/bulk")
			}
		})
	}
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

// benchConcurrent runs 64 clients (32 per CPU on 2 CPUs: SetParallelism(64/GOMAXPROCS)) and
// reports the p50 latency beside ns/op (the inverse of throughput).
func benchConcurrent(b *testing.B, r *rig, proxy *url.URL, u string, keepAlive bool) {
	b.SetParallelism(max(64/runtimeProcs(), 1))
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := benchClient(r, proxy, keepAlive)
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			fetch(b, c, u)
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	}
}

type gatewayConfig = gateway.Config

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
