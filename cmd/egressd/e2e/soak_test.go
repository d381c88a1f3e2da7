package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// soakSize is how big a soak is: `make soak` (EGRESSD_SOAK=full) is issue 15's run, 50 local
// proxies and 4 crawlers leasing and releasing for minutes; CI (the default) a short run of
// the same test that still judges goroutines, fds and the first phase events.
type soakSize struct {
	Name     string
	Proxies  int
	Crawlers int
	Load     time.Duration // how long the crawlers lease
	Every    time.Duration // between samples
}

func soakSizeFromEnv(t *testing.T) soakSize {
	if os.Getenv("EGRESSD_SOAK") != "full" {
		return soakSize{Name: "ci", Proxies: 10, Crawlers: 2, Load: 20 * time.Second, Every: 5 * time.Second}
	}
	s := soakSize{Name: "full", Proxies: 50, Crawlers: 4, Load: 5 * time.Minute, Every: 30 * time.Second}
	if d := os.Getenv("EGRESSD_SOAK_DURATION"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			t.Fatalf("EGRESSD_SOAK_DURATION=%q: want a positive duration like 10m", d)
		}
		s.Load = v
	}
	return s
}

// soakSample is one row of the soak's table.
type soakSample struct {
	At         time.Duration // since the load began (negative: before)
	Cycles     int64         // lease cycles (acquire+release) so far
	RSS        int64         // VmRSS, bytes
	HeapInuse  int64         // go_memstats_heap_inuse_bytes
	Goroutines int64
	FDs        int64
	Kept       map[string]uint64 // events kept, by stream/kind
}

// The soak: a crawler load against the real all-in-one, sampled every Every, judged on what
// must not grow with the load (goroutines, fds) and what must survive it (the first phase
// event of every proxy, read back with `egressd events --kind phase -f=false`).
func TestSoak(t *testing.T) {
	needNats(t)
	size := soakSizeFromEnv(t)
	t.Logf("soak size %s: %d proxies, %d crawlers, %s of load, a sample every %s (EGRESSD_SOAK=full for the long run)",
		size.Name, size.Proxies, size.Crawlers, size.Load, size.Every)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfgPath := writeConfig(t, dir, 80)
	appendFile(t, cfgPath, "events:\n  stats: {interval: "+soakStatsInterval.String()+"}\n")
	n := startNode(t, dir, "--config", cfgPath, "--pprof-listen", "127.0.0.1:0", "--log-level", "info")
	metricsURL := loggedURL(t, n, `msg="serving /metrics and /healthz" .*url=(http://\S+)`) + "/metrics"
	pprofBase := pprofURL(t, n)

	_, js := n.client()
	proxies, err := js.KeyValue(t.Context(), events.BucketProxies)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range size.Proxies {
		name := fmt.Sprintf("soak-%02d", i)
		names = append(names, name)
		spec := `{"provider":"local","attributes":{"role":"soak"},"healthCheck":{"intervalSeconds":5,"timeoutSeconds":2,"failureThreshold":3,"successThreshold":1}}`
		if _, err := proxies.Put(t.Context(), name, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	n.waitRows("every soak proxy Ready", 2*time.Minute, allPhase(names, events.PhaseReady))
	first := firstPhaseEvents(t, n)
	for _, name := range names {
		if _, ok := first[name]; !ok {
			t.Fatalf("no phase event of %s before the load", name)
		}
	}

	sample := func(start time.Time, cycles int64) soakSample {
		m := scrape(t, metricsURL)
		return soakSample{At: time.Since(start).Round(time.Second), Cycles: cycles, RSS: vmRSS(t, n.cmd.Process.Pid),
			HeapInuse: int64(m["go_memstats_heap_inuse_bytes"]), Goroutines: int64(m["go_goroutines"]),
			FDs: int64(m["process_open_fds"]), Kept: eventsKept(t, js)}
	}
	start := time.Now()
	before := sample(start, 0)
	samples := []soakSample{before}
	saveHeap(t, pprofBase, "before")

	var cycles, failures atomic.Int64
	var lastErr atomic.Value
	ctx, stop := context.WithTimeout(t.Context(), size.Load)
	defer stop()
	var wg sync.WaitGroup
	for i := range size.Crawlers {
		cnc, err := nats.Connect(n.url, nats.Name(fmt.Sprintf("soak crawler %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer cnc.Close()
		cl := client.New(cnc, client.WithRequestTimeout(5*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			crawl(ctx, cl, fmt.Sprintf("soak-crawler-%d", i), &cycles, &failures, &lastErr)
		}()
	}
	tick := time.NewTicker(size.Every)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			samples = append(samples, sample(start, cycles.Load()))
		}
	}
	tick.Stop()
	wg.Wait()
	loadTook := time.Since(start)
	saveHeap(t, pprofBase, "after-load")

	// After the load, what it started must be gone: wait (within a budget) for goroutines and
	// fds to come back near the idle figures of before the load.
	var after soakSample
	waitUntil(t, "goroutines and fds back to their figures before the load", time.Minute, func() (bool, string) {
		after = sample(start, cycles.Load())
		return after.Goroutines <= before.Goroutines+slack(before.Goroutines) && after.FDs <= before.FDs+slack(before.FDs),
			fmt.Sprintf("goroutines %d (before %d), fds %d (before %d)", after.Goroutines, before.Goroutines, after.FDs, before.FDs)
	})
	samples = append(samples, after)
	t.Logf("%d lease cycles in %s (%.0f/s), %d failed (last: %v)", cycles.Load(), loadTook.Round(time.Second),
		float64(cycles.Load())/loadTook.Seconds(), failures.Load(), lastErr.Load())
	t.Log("soak figures:\n" + soakTable(samples))
	if cycles.Load() == 0 {
		t.Fatal("no lease cycle went through")
	}

	// Every cycle is in the lease statistics, once: granted and released. A request whose
	// reply was lost (a failure) may have happened too, and so may the acquire each crawler
	// was making when the load ended.
	waitUntil(t, "the lease statistics count every cycle", soakStatsInterval+time.Minute, func() (bool, string) {
		sums, err := fleet.SumLeaseStats(t.Context(), js, start.Add(-time.Minute), time.Time{}, fleet.ByTarget)
		if err != nil {
			return false, err.Error()
		}
		var got events.LeaseCounts
		for _, s := range sums {
			if s.Target == "soak.example" {
				got = s.LeaseCounts
			}
		}
		c, f := int(cycles.Load()), int(failures.Load())
		return got.Granted >= c && got.Granted <= c+f+size.Crawlers && got.Released >= c && got.Released <= c+f,
			fmt.Sprintf("%d cycles, %d failures; statistics: %d granted, %d released", c, f, got.Granted, got.Released)
	})

	// The history of the fleet's start is still there after the lease load.
	now := firstPhaseEvents(t, n)
	for _, name := range names {
		if now[name] != first[name] {
			t.Errorf("%s's first phase event %s is no longer readable after %d lease cycles (first now: %q)",
				name, first[name], cycles.Load(), now[name])
		}
	}
}

// soakStatsInterval is the leasers' statistics interval in the soak: short, so that the sums
// are complete soon after the load.
const soakStatsInterval = 5 * time.Second

func appendFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// slack is how far a count may be above its idle figure after the load: probes and the
// status page's scrapes come and go, a leak grows with the load.
func slack(v int64) int64 { return 10 + v/10 }

// crawl leases and releases until ctx ends, as a crawler that takes a proxy for one fetch.
func crawl(ctx context.Context, cl *client.Client, holder string, cycles, failures *atomic.Int64, lastErr *atomic.Value) {
	for ctx.Err() == nil {
		g, err := cl.AcquireOnce(ctx, client.AcquireOptions{Selector: map[string]string{"role": "soak"},
			Target: "soak.example", TTL: time.Minute, Holder: holder})
		if err == nil {
			// Released on its own context: a lease granted as the load ends is still given back.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = cl.Release(rctx, g.ID)
			cancel()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures.Add(1)
			lastErr.Store(err.Error())
			continue
		}
		cycles.Add(1)
	}
}

// firstPhaseEvents is the ID of each proxy's oldest phase event that `egressd events --kind
// phase -f=false` prints.
func firstPhaseEvents(t *testing.T, n *node) map[string]string {
	t.Helper()
	out := n.egressd("events", "--kind", "phase", "-f=false", "--since", "24h", "--json")
	first := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev events.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("egressd events --json printed %q: %v", sc.Text(), err)
		}
		if _, ok := first[ev.Proxy]; !ok {
			first[ev.Proxy] = ev.ID
		}
	}
	return first
}

var urlRe sync.Map // pattern → *regexp.Regexp

// loggedURL waits for the node to log a line matching pattern and returns its first group.
func loggedURL(t testing.TB, n *node, pattern string) string {
	t.Helper()
	re, _ := urlRe.LoadOrStore(pattern, regexp.MustCompile(pattern))
	var url string
	waitUntil(t, "an address in the log", 10*time.Second, func() (bool, string) {
		m := re.(*regexp.Regexp).FindStringSubmatch(n.logs())
		if m != nil {
			url = m[1]
		}
		return m != nil, "not logged"
	})
	return url
}

// scrape reads the untyped samples of a Prometheus text page (no labels) into a map.
func scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}

// vmRSS is a process's resident set from /proc, in bytes.
func vmRSS(t testing.TB, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			return kib << 10
		}
	}
	return 0
}

// eventsKept is how many messages every history stream (EGRESS_*) keeps, by stream and the
// subject's third token (the kind of an event; "lease" for the statistics), whatever the
// layout of the streams.
func eventsKept(t testing.TB, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kept := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, "EGRESS_") {
			continue
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		for subj, c := range info.State.Subjects {
			tok := strings.SplitN(subj, ".", 4)
			if len(tok) >= 3 {
				kept[name+"/"+tok[2]] += c
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return kept
}

// saveHeap keeps a heap profile of the node when EGRESSD_SOAK_PROFILES names a directory
// (`make soak` does), for `go tool pprof -top`.
func saveHeap(t testing.TB, base, label string) {
	t.Helper()
	dir := os.Getenv("EGRESSD_SOAK_PROFILES")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := filepath.Join(dir, "heap-"+label+".pb.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount", "25", "-sample_index", "inuse_space", p).CombinedOutput(); err == nil {
		t.Logf("heap %s (%s):\n%s", label, p, out)
	}
}

// soakTable prints the samples as the table docs/reliability.md shows.
func soakTable(samples []soakSample) string {
	kinds := map[string]bool{}
	for _, s := range samples {
		for k := range s.Kept {
			kinds[k] = true
		}
	}
	var cols []string
	for k := range kinds {
		cols = append(cols, k)
	}
	sort.Strings(cols)
	var b strings.Builder
	fmt.Fprintf(&b, "| t | lease cycles | RSS MiB | heap in use MiB | goroutines | fds |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %s |", c)
	}
	b.WriteString("\n|---|---|---|---|---|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %d | %d |", s.At, s.Cycles, float64(s.RSS)/(1<<20), float64(s.HeapInuse)/(1<<20), s.Goroutines, s.FDs)
		for _, c := range cols {
			fmt.Fprintf(&b, " %d |", s.Kept[c])
		}
		b.WriteString("\n")
	}
	return b.String()
}
