package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rssKiB reads a process's resident set (VmRSS), its peak (VmHWM) and its anonymous part
// (RssAnon) from /proc. The rest is mostly the binary's pages, file-backed: shared, and given
// back under memory pressure without a write; the anonymous part is what the process holds.
func rssKiB(b *testing.B, pid int) (rss, hwm, anon int) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.Atoi(f[1])
		case "VmHWM:":
			hwm, _ = strconv.Atoi(f[1])
		case "RssAnon:":
			anon, _ = strconv.Atoi(f[1])
		}
	}
	return rss, hwm, anon
}

// BenchmarkRunHolding10k is the all-in-one `egressd run` (the real binary, default settings:
// a 30 s probe interval) taking 10,000 external proxies over four real forward proxies: the
// time from the first put to all Ready in probe intervals, its memory holding them against
// its memory idle in the same run, and how long `egressd status` takes at that size.
func BenchmarkRunHolding10k(b *testing.B) {
	const n = 10_000
	dir := b.TempDir()
	var backends []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.99.%d:0", 10+i))
		if err != nil {
			b.Fatal(err)
		}
		backends = append(backends, ln.Addr().String())
		go func() { _ = forwardproxy.Serve(ctx, ln, forwardproxy.Config{}) }()
	}
	node := startNode(b, dir, "--log-level", "info", "--pprof-listen", "127.0.0.1:0")
	pprofBase := pprofURL(b, node)
	pid := node.cmd.Process.Pid
	time.Sleep(5 * time.Second) // idle, settled
	idle, _, idleAnon := rssKiB(b, pid)

	nc, err := nats.Connect(node.url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	store, err := kvstore.Bind(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	kvstoretest.PutMany(b, js, func(yield func(kvstoretest.Record) bool) {
		for i := range n {
			host, port, _ := net.SplitHostPort(backends[i%len(backends)])
			spec := fmt.Sprintf(`{"mode":"external","endpoint":{"host":%q,"port":%s}}`, host, port)
			if !yield(kvstoretest.Record{Bucket: events.BucketProxies, Key: fmt.Sprintf("ext-%05d", i), Value: []byte(spec)}) {
				return
			}
		}
	})
	seeded := time.Since(start)
	ready := 0
	for deadline := time.Now().Add(5 * time.Minute); ready < n; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d Ready after 5 minutes", ready, n)
		}
		sts, err := kvstore.Latest(ctx, store.Status)
		if err != nil {
			b.Fatal(err)
		}
		ready = 0
		for _, e := range sts {
			var st events.ProxyStatus
			if json.Unmarshal(e.Value(), &st) == nil && st.Phase == events.PhaseReady {
				ready++
			}
		}
	}
	converged := time.Since(start)
	b.StopTimer()
	time.Sleep(10 * time.Second) // a third of a probe round in the steady state
	holding, hwm, anon := rssKiB(b, pid)
	saveHeap(b, pprofBase, "holding-10k") // with EGRESSD_SOAK_PROFILES set
	statusStart := time.Now()
	out := node.egressd("status", "-o", "json")
	statusTook := time.Since(statusStart)
	tableStart := time.Now()
	node.egressd("status", "--phase", "Ready", "--selector", "nothing=here")
	filteredTook := time.Since(tableStart)

	b.ReportMetric(converged.Seconds(), "s-to-all-Ready")
	b.ReportMetric(converged.Seconds()/30, "intervals-to-all-Ready")
	b.ReportMetric(float64(idle)/1024, "MiB-rss-idle")
	b.ReportMetric(float64(holding)/1024, "MiB-rss-10k")
	b.ReportMetric(float64(hwm)/1024, "MiB-rss-peak")
	b.ReportMetric(float64(idleAnon)/1024, "MiB-anon-idle")
	b.ReportMetric(float64(anon)/1024, "MiB-anon-10k")
	b.ReportMetric(statusTook.Seconds(), "s-status-json")
	b.Logf("%d specs put in %v; all Ready %v after the first put (%.2f intervals of 30 s); RSS idle %d MiB, holding %d MiB (peak %d MiB), of it anonymous %d and %d MiB; status -o json %v (%d bytes), filtered table %v",
		n, seeded.Round(time.Millisecond), converged.Round(time.Millisecond), converged.Seconds()/30, idle/1024, holding/1024, hwm/1024, idleAnon/1024, anon/1024,
		statusTook.Round(time.Millisecond), len(out), filteredTook.Round(time.Millisecond))
}
