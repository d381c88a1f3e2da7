package prober

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// cpuTime is the CPU this process has used (user and system). The benchmarks run the NATS
// server, the forward proxies and the echo endpoint in process, so it counts their share too,
// for the probe and for its baseline alike.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawConnect is the floor of one probe: a CONNECT through the proxy to the echo endpoint and
// one GET through the tunnel, read to the end, nothing recorded.
func rawConnect(proxy, echo string) error {
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("CONNECT: %s", resp.Status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", echo)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v map[string]any
	return json.NewDecoder(resp.Body).Decode(&v)
}

// BenchmarkProbeRound is one prober holding 10,000 proxies (over four real forward proxies)
// at a 10 s interval: after the first round, over one whole interval, the share of proxies
// probed and the CPU per probe (both paths, CONNECT and plain-HTTP forward, and the record),
// against a raw CONNECT round trip through the same proxies measured in the same run (16 at
// a time, about the prober's concurrency in use).
func BenchmarkProbeRound(b *testing.B) {
	const (
		n        = 10_000
		interval = 10 * time.Second
	)
	e := newEnv(b)
	var proxies []string
	for i := range 4 {
		addr, _ := startForwardProxy(b, fmt.Sprintf("127.0.0.%d:0", 30+i), "", "")
		proxies = append(proxies, addr)
	}
	echo := e.echoURL[len("http://") : len(e.echoURL)-1]

	// Baseline first, on a quiet machine.
	const rawOps = 4000
	start, cpu0 := time.Now(), cpuTime(b)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < rawOps; i += 16 {
				if err := rawConnect(proxies[i%len(proxies)], echo); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rawCPU := (cpuTime(b) - cpu0) / rawOps
	rawWall := time.Since(start) / rawOps

	e.seed(b, n, proxies, int(interval.Seconds()))
	w, err := e.store.Health.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = kvstore.StopWatch(w) }()
	p := e.prober(nil, Config{Worker: "bench", Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The first round: every proxy is new, so all are due at once.
	firstAt := time.Now()
	probed := map[string]bool{}
	for len(probed) < n {
		entry := <-w.Updates()
		if entry != nil && entry.Operation() == jetstream.KeyValuePut {
			probed[entry.Key()] = true
		}
	}
	first := time.Since(firstAt)

	// One whole interval of the steady state: after the first round each proxy moves to its
	// phase, its next probe between half and one and a half intervals later.
	settle := time.After(interval + interval/2)
drain:
	for {
		select {
		case <-w.Updates():
		case <-settle:
			break drain
		}
	}
	b.ResetTimer()
	clear(probed)
	probes := 0
	cpu0 = cpuTime(b)
	from := time.Now()
	to := from.Add(interval)
	// Counted by when each probe started (its record's lastProbeAt), not when its write
	// arrived, so a probe just before the window is not counted in it.
	end := time.After(interval + time.Second)
window:
	for {
		select {
		case entry := <-w.Updates():
			var h events.ProxyHealth
			if entry == nil || entry.Operation() != jetstream.KeyValuePut || json.Unmarshal(entry.Value(), &h) != nil {
				continue
			}
			if !h.LastProbeAt.Before(from) && h.LastProbeAt.Before(to) {
				probed[entry.Key()] = true
				probes++
			}
		case <-end:
			break window
		}
	}
	perProbe := (cpuTime(b) - cpu0) / time.Duration(max(probes, 1))
	b.StopTimer()
	b.ReportMetric(float64(len(probed))/n*100, "%probed/interval")
	b.ReportMetric(float64(perProbe.Microseconds()), "cpu-µs/probe")
	b.ReportMetric(float64(rawCPU.Microseconds()), "cpu-µs/raw-connect")
	b.ReportMetric(float64(perProbe)/float64(rawCPU), "x-raw-cpu")
	b.ReportMetric(first.Seconds(), "s-first-round")
	b.Logf("%d proxies, interval %v: first round %v; then %d probes of %d distinct proxies in one interval, %v CPU each; raw CONNECT %v CPU, %v wall each",
		n, interval, first.Round(time.Millisecond), probes, len(probed), perProbe, rawCPU, rawWall)
}

func (e *env) seed(b *testing.B, n int, proxies []string, intervalSeconds int) {
	spec := []byte(fmt.Sprintf(`{"provider":"local","healthCheck":{"intervalSeconds":%d}}`, intervalSeconds))
	kvstoretest.PutMany(b, e.store.JS, func(yield func(kvstoretest.Record) bool) {
		for i := range n {
			name := fmt.Sprintf("px-%05d", i)
			host, port, _ := net.SplitHostPort(proxies[i%len(proxies)])
			pn, _ := strconv.Atoi(port)
			st, _ := json.Marshal(events.ProxyStatus{V: 1, Phase: events.PhaseRunning, Mode: "managed", Provider: "local", Host: "h1",
				IP: host, Port: pn, AddressAt: time.Now().UTC()})
			if !yield(kvstoretest.Record{Bucket: events.BucketProxies, Key: name, Value: spec}) ||
				!yield(kvstoretest.Record{Bucket: events.BucketStatus, Key: name, Value: st}) {
				return
			}
		}
	})
}
