package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The benchmarks of issue 23's "Measure" (docs/performance.md): an acquire that waits on a
// pool scaled to zero against the boot of the member it waits for, and a replayed demand
// trace on an autoscaled pool against the same trace on a fixed pool sized for its peak. Both
// run the real binary (`egressd run`) with local forward proxies; the times are the server's
// (KV entries' timestamps) and the crawlers' own clocks, on one machine.

// benchNode starts `egressd run` with the local provider on 127.0.51.x and returns it with a
// client connection and the KV buckets.
func benchNode(b *testing.B) (*node, *nats.Conn, jetstream.JetStream) {
	b.Helper()
	dir := b.TempDir()
	b.Cleanup(func() { killProcs(b, dir) })
	cfg := writeConfig(b, dir, 51)
	appendConfig(b, cfg, "leases:\n  demandWindow: 5s\n")
	n := startNode(b, dir, "--config", cfg, "--log-level", "info")
	nc, err := nats.Connect(n.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return n, nc, js
}

// boots follows the pool's members: when each was put (its spec's first entry) and when it
// was first Ready (its status entry), both on the server's clock, and how many there are.
type boots struct {
	mu      sync.Mutex
	put     map[string]time.Time
	ready   map[string]time.Time
	members map[string]bool
}

func watchBoots(b *testing.B, js jetstream.JetStream, pool string) *boots {
	b.Helper()
	w := &boots{put: map[string]time.Time{}, ready: map[string]time.Time{}, members: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	for _, bucket := range []string{events.BucketProxies, events.BucketStatus} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			b.Fatal(err)
		}
		kw, err := kv.WatchAll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer kw.Stop() //nolint:errcheck // ends with the benchmark
			for e := range kw.Updates() {
				if e != nil {
					w.apply(bucket, pool, e)
				}
			}
		})
	}
	return w
}

func (w *boots) apply(bucket, pool string, e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	put := e.Operation() == jetstream.KeyValuePut
	if bucket == events.BucketProxies {
		var o struct {
			Pool string `json:"pool"`
		}
		switch {
		case put && json.Unmarshal(e.Value(), &o) == nil && o.Pool == pool:
			if !w.members[e.Key()] {
				w.put[e.Key()] = e.Created()
			}
			w.members[e.Key()] = true
		default:
			delete(w.members, e.Key())
		}
		return
	}
	var st events.ProxyStatus
	if put && json.Unmarshal(e.Value(), &st) == nil && st.Phase == events.PhaseReady {
		if _, ok := w.ready[e.Key()]; !ok {
			w.ready[e.Key()] = e.Created()
		}
	}
}

func (w *boots) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.members)
}

// boot is proxy's kv put → Ready, and whether it is known yet.
func (w *boots) boot(proxy string) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok1 := w.put[proxy]
	r, ok2 := w.ready[proxy]
	return r.Sub(p), ok1 && ok2
}

func putPool(b *testing.B, js jetstream.JetStream, name, spec string) {
	b.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketPools)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), name, []byte(spec)); err != nil {
		b.Fatal(err)
	}
}

func waitFor(b *testing.B, what string, budget time.Duration, cond func() bool) {
	b.Helper()
	waitUntil(b, what, budget, func() (bool, string) { return cond(), "" })
}

// acquireLease asks for a lease and says whether it got one.
func acquireLease(nc *nats.Conn, body string) (events.LeaseGrant, error) {
	m, err := nc.Request(events.LeaseAcquireSubject, []byte(body), 90*time.Second)
	if err != nil {
		return events.LeaseGrant{}, err
	}
	var lr events.LeaseReply
	if err := json.Unmarshal(m.Data, &lr); err != nil || lr.Lease.ID == "" {
		return events.LeaseGrant{}, fmt.Errorf("no lease: %s", m.Data)
	}
	return lr.Lease, nil
}

func releaseLease(nc *nats.Conn, id string) error {
	_, err := nc.Request(events.LeaseReleaseSubject, fmt.Appendf(nil, `{"id":%q}`, id), 30*time.Second)
	return err
}

// BenchmarkScaleFromZeroAcquire: an acquire with waitSeconds on a local pool at zero members
// (autoscale min 0) until its lease, against the kv put → Ready of the member it got, measured
// in the same run (issue 23: goal ≤ 1.2×), and where the difference goes. Each iteration
// starts at zero members.
func BenchmarkScaleFromZeroAcquire(b *testing.B) {
	_, nc, js := benchNode(b)
	w := watchBoots(b, js, "zero")
	putPool(b, js, "zero", `{"template":{"provider":"local","maxLeases":1,`+poolHealth+`},`+
		`"autoscale":{"min":0,"max":1,"scaleDownAfterSeconds":1,"targetUtilization":1}}`)
	var waited, booted, decided, served time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		waitFor(b, "zero members", 2*time.Minute, func() bool { return w.count() == 0 })
		time.Sleep(6 * time.Second) // the last demand out of the leasers' 5 s window
		b.StartTimer()
		start := time.Now()
		g, err := acquireLease(nc, `{"selector":{"pool":"zero"},"ttlSeconds":60,"waitSeconds":60}`)
		if err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		waited += end.Sub(start)
		b.StopTimer()
		var boot time.Duration
		waitFor(b, "the member's boot recorded", 30*time.Second, func() bool {
			var ok bool
			boot, ok = w.boot(g.Proxy)
			return ok
		})
		booted += boot
		w.mu.Lock()
		decided += w.put[g.Proxy].Sub(start)
		served += end.Sub(w.ready[g.Proxy])
		w.mu.Unlock()
		if err := releaseLease(nc, g.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(waited.Milliseconds())/float64(b.N), "wait-ms/op")
	b.ReportMetric(float64(booted.Milliseconds())/float64(b.N), "boot-ms/op")
	b.ReportMetric(float64(waited)/float64(booted), "wait/boot")
	// Where the rest goes: from the acquire to the member's spec (the leaser's demand record
	// and the pool controller's decision), and from its Ready to the lease in the caller's hand.
	b.ReportMetric(float64(decided.Milliseconds())/float64(b.N), "to-decision-ms/op")
	b.ReportMetric(float64(served.Milliseconds())/float64(b.N), "ready-to-lease-ms/op")
}

// The demand trace: ramp 0 → 200 crawlers, hold, ramp down, each crawler holding each lease
// a random 1–10 s (seed 23), all of it scaled in time by EGRESSD_TRACE_SCALE (default 0.25:
// 15 s ramps and hold, holds of 0.25–2.5 s). maxLeases 10: the peak needs 20 members.
const (
	tracePeak      = 200
	traceMaxLeases = 10
	traceWait      = 30 // waitSeconds of every acquire
)

func traceScale(b *testing.B) float64 {
	if s := os.Getenv("EGRESSD_TRACE_SCALE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 || v > 1 {
			b.Fatalf("EGRESSD_TRACE_SCALE=%q: want a factor in (0, 1]", s)
		}
		return v
	}
	return 0.25
}

// BenchmarkDemandTrace replays the trace on an autoscaled pool, with the crawlers naming no
// strategy (an autoscaled pool's default, packed) and asking for the balanced order, and on
// a fixed pool sized for its peak (its default, balanced): the
// waits' p50 and p95, and member-seconds (members summed over time, from the trace's start
// until an autoscaled pool is back at zero) against the ideal, the crawlers' demand
// integrated over time ÷ maxLeases.
func BenchmarkDemandTrace(b *testing.B) {
	for _, run := range []struct {
		name     string
		fixed    bool
		strategy events.Strategy
	}{{"autoscale", false, ""}, {"autoscale-balanced", false, events.StrategyBalanced}, {"fixed", true, ""}} {
		b.Run(run.name, func(b *testing.B) {
			for range b.N {
				replay(b, run.fixed, run.strategy)
			}
		})
	}
}

func replay(b *testing.B, fixed bool, strategy events.Strategy) {
	sizing := `"autoscale":{"min":0,"max":25,"scaleDownAfterSeconds":10,"targetUtilization":1}`
	if fixed {
		sizing = fmt.Sprintf(`"replicas":%d`, tracePeak/traceMaxLeases)
	}
	scale := traceScale(b)
	ramp := time.Duration(60 * scale * float64(time.Second))
	_, nc, js := benchNode(b)
	w := watchBoots(b, js, "trace")
	putPool(b, js, "trace", fmt.Sprintf(`{"template":{"provider":"local","maxLeases":%d,%s},%s}`, traceMaxLeases, poolHealth, sizing))
	if fixed { // fixed: its members are up before the trace, as they would be all day
		waitFor(b, "the fixed pool Ready", 3*time.Minute, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.ready) >= tracePeak/traceMaxLeases
		})
	}
	rng := rand.New(rand.NewPCG(23, 23))
	holds := make([][]time.Duration, tracePeak)
	for i := range holds {
		for range 200 {
			holds[i] = append(holds[i], time.Duration((1+9*rng.Float64())*scale*float64(time.Second)))
		}
	}
	var (
		mu      sync.Mutex
		waits   []time.Duration
		demand  time.Duration // crawler-seconds wanting a lease
		refused int
		wg      sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	stopSampling := make(chan struct{})
	var memberSeconds float64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				memberSeconds += float64(w.count()) * 0.25
			}
		}
	}()
	for i := range tracePeak {
		from := time.Duration(float64(ramp) * float64(i) / tracePeak)
		until := 2*ramp + time.Duration(float64(ramp)*float64(tracePeak-i)/tracePeak)
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(from)))
			end := start.Add(until)
			for k := 0; time.Now().Before(end); k++ {
				asked := time.Now()
				req := fmt.Sprintf(`{"selector":{"pool":"trace"},"ttlSeconds":60,"waitSeconds":%d,"holder":"c%d"`, traceWait, i)
				if strategy != "" {
					req += fmt.Sprintf(`,"strategy":%q`, strategy)
				}
				g, err := acquireLease(nc, req+"}")
				mu.Lock()
				if err != nil {
					refused++
					mu.Unlock()
					continue
				}
				waits = append(waits, time.Since(asked))
				mu.Unlock()
				time.Sleep(holds[i][k%len(holds[i])])
				_ = releaseLease(nc, g.ID)
			}
			mu.Lock()
			demand += until - from
			mu.Unlock()
		})
	}
	wg.Wait()
	if !fixed {
		waitFor(b, "the autoscaled pool back at zero", 3*time.Minute, func() bool { return w.count() == 0 })
	}
	close(stopSampling)
	<-sampled
	b.StopTimer()
	slices.Sort(waits)
	q := func(p float64) float64 {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(int(p*float64(len(waits))), len(waits)-1)].Seconds()
	}
	ideal := demand.Seconds() / traceMaxLeases
	b.ReportMetric(q(0.5), "wait-p50-s")
	b.ReportMetric(q(0.95), "wait-p95-s")
	b.ReportMetric(float64(len(waits)), "leases")
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(memberSeconds, "member-s")
	b.ReportMetric(ideal, "ideal-member-s")
	b.ReportMetric(memberSeconds/ideal, "member-s/ideal")
	b.ReportMetric(scale, "time-scale")
}
