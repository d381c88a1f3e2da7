package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// fast shortens presence timings so hand-overs happen within a test.
func fast(cfg Config) Config {
	cfg.Heartbeat, cfg.MemberTTL = 200*time.Millisecond, time.Second
	return cfg
}

func TestFilters(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	for _, p := range []struct{ proxy, provider, host string }{{"pa", "a", "h1"}, {"pb1", "b", "h1"}, {"pb2", "b", "h2"}} {
		e.putSpec(p.proxy, spec{})
		e.putStatus(p.proxy, p.provider, p.host, addr)
	}
	p := e.prober(nil, Config{Worker: "only-a", Filters: []string{"a", "b.h2"}})
	e.run(p)
	eventually(t, 5*time.Second, "a's and b.h2's proxies probed", func() bool {
		_, a := e.health("pa")
		_, b2 := e.health("pb2")
		return a && b2
	})
	// Its presence record says what it schedules: a's and b.h2's proxies, two. One that had
	// taken b.h1's too would count three (and probe it at its phase).
	eventually(t, 10*time.Second, "the prober's presence counting its two proxies", func() bool {
		entry, err := e.store.Probers.Get(context.Background(), p.member.ID)
		var m events.ProberMember
		return err == nil && json.Unmarshal(entry.Value(), &m) == nil && m.Owned == 2
	})
	if _, ok := e.health("pb1"); ok {
		t.Error("a prober limited to a and b.h2 probed a proxy of b.h1")
	}
}

// healthWrites counts puts to proxy_health from now on, by prober.
func (e *env) healthWrites() func() map[string]int {
	e.t.Helper()
	w, err := e.store.Health.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	var (
		mu sync.Mutex
		by = map[string]int{}
		wg sync.WaitGroup
	)
	e.t.Cleanup(func() { w.Stop(); wg.Wait() })
	wg.Go(func() {
		for entry := range w.Updates() {
			var h events.ProxyHealth
			if entry == nil || entry.Operation() != jetstream.KeyValuePut || json.Unmarshal(entry.Value(), &h) != nil {
				continue
			}
			mu.Lock()
			by[h.Prober]++
			mu.Unlock()
		}
	})
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range by {
			out[k] = v
		}
		return out
	}
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// Two probers divide the fleet: each proxy is probed by exactly one of them.
func TestProbersShareTheFleet(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	writes := e.healthWrites()
	const n = 40
	for i := range n {
		proxy := fmt.Sprintf("p%d", i)
		e.putSpec(proxy, spec{check: map[string]any{"intervalSeconds": 300}})
		e.putStatus(proxy, "local", "h1", addr)
	}
	// Both present before either probes, so neither probes the other's share first.
	p1, p2 := e.prober(e.connect(), Config{Worker: "w1"}), e.prober(e.connect(), Config{Worker: "w2"})
	for _, p := range []*Prober{p1, p2} {
		if err := writeMember(e, p); err != nil {
			t.Fatal(err)
		}
	}
	e.run(p1)
	e.run(p2)
	eventually(t, 10*time.Second, "every proxy probed", func() bool { return total(writes()) >= n })
	time.Sleep(300 * time.Millisecond)
	by := writes()
	if total(by) != n || by["w1"] == 0 || by["w2"] == 0 {
		t.Fatalf("health writes by prober %v, want %d in all, shared", by, n)
	}
	for i := range n {
		if h, ok := e.health(fmt.Sprintf("p%d", i)); !ok || h.ConsecutiveSuccesses != 1 {
			t.Errorf("p%d probed more or less than once: %+v", i, h)
		}
	}
	t.Logf("probes per prober: %v", by)
}

// writeMember puts p's presence record before it runs, as if it had been running already.
func writeMember(e *env, p *Prober) error {
	b, err := json.Marshal(p.member)
	if err != nil {
		return err
	}
	_, err = e.store.Probers.Put(context.Background(), p.member.ID, b)
	return err
}

// When a prober stops, cleanly or by vanishing, the others take its share over.
func TestHandOver(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			e := newEnv(t)
			addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
			const n = 20
			for i := range n {
				proxy := fmt.Sprintf("p%d", i)
				e.putSpec(proxy, spec{check: map[string]any{"intervalSeconds": 1}})
				e.putStatus(proxy, "local", "h1", addr)
			}
			gone := e.connect()
			w1 := e.prober(gone, fast(Config{Worker: "w1"}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w1.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			<-w1.Ready()
			e.run(e.prober(e.connect(), fast(Config{Worker: "w2"})))
			probedBy := func(worker string, since time.Time) int {
				k := 0
				for i := range n {
					if h, ok := e.health(fmt.Sprintf("p%d", i)); ok && h.Prober == worker && h.LastProbeAt.After(since) {
						k++
					}
				}
				return k
			}
			eventually(t, 10*time.Second, "both probers probing", func() bool {
				return probedBy("w1", time.Time{}) > 0 && probedBy("w2", time.Time{}) > 0
			})
			stopped := time.Now()
			if clean {
				cancel()
			} else {
				// Vanish: the connection dies, so the presence record is neither renewed nor
				// removed, and only its TTL tells the others.
				gone.JS.Conn().Close()
			}
			eventually(t, 10*time.Second, "w2 probing every proxy", func() bool { return probedBy("w2", stopped) == n })
			t.Logf("w2 took over %d proxies within %v", n, time.Since(stopped).Round(10*time.Millisecond))
		})
	}
}

// delayObserver signals each probe start.
type delayObserver struct {
	noObserver
	started chan struct{}
}

func (o delayObserver) ObserveProbeDelay(time.Duration) {
	select {
	case o.started <- struct{}{}:
	default:
	}
}

func TestRunStopsWithProbesInFlight(t *testing.T) {
	e := newEnv(t)
	hole := blackHole(t)
	obs := delayObserver{started: make(chan struct{}, 1)}
	p := e.prober(nil, Config{Observer: obs})
	e.putSpec("p1", spec{check: map[string]any{"intervalSeconds": 60, "timeoutSeconds": 60}})
	e.putStatus("p1", "local", "h1", hole)
	stop := e.run(p)
	select {
	case <-obs.started:
	case <-time.After(5 * time.Second):
		t.Fatal("probe not started")
	}
	start := time.Now()
	stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if _, ok := e.health("p1"); ok {
		t.Error("a probe cut short by shutdown was recorded")
	}
	if entry, err := e.store.Probers.Get(context.Background(), p.member.ID); err == nil {
		t.Errorf("presence left behind after a clean stop: %s", entry.Value())
	}
}

func TestRecordExpires(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	e.putSpec("p1", spec{check: map[string]any{"intervalSeconds": 1}})
	e.probeNow(e.prober(nil, Config{}), "p1", addr)
	start := time.Now()
	eventually(t, 8*time.Second, "record expired", func() bool { _, ok := e.health("p1"); return !ok })
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("expired after %v, want about 3s", d)
	}
}

// A probe-now request (a crawler reported a failure) probes at once, between the scheduled
// probes; a bad one is dropped with a log line saying why.
func TestProbeNowRequests(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	e.putSpec("p1", spec{check: map[string]any{"intervalSeconds": 300}})
	e.putStatus("p1", "local", "h1", addr)
	e.run(e.prober(nil, Config{}))
	eventually(t, 5*time.Second, "first probe", func() bool { h, ok := e.health("p1"); return ok && h.ConsecutiveSuccesses == 1 })

	nc := e.connect().JS.Conn()
	subj, data := request(t, "p1", "local", "h1", addr)
	nobodySubj, nobody := request(t, "nobody", "local", "h1", addr)
	for _, m := range []struct {
		subj string
		data []byte
	}{
		{subj, []byte("{")}, // malformed
		{events.ProbeSubject("other", "h1", "p1"), data}, // subject and body disagree
		{nobodySubj, nobody},                             // unknown proxy
		{subj, data},                                     // the real one
	} {
		if err := nc.Publish(m.subj, m.data); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "probed again on request", func() bool {
		h, _ := e.health("p1")
		return h.ConsecutiveSuccesses == 2
	})
	eventually(t, 5*time.Second, "bad requests logged", func() bool {
		logs := e.logs.String()
		return strings.Count(logs, "malformed probe request") == 2 && strings.Contains(logs, "does not know")
	})
}

func TestConcurrentRecordsLoseNothing(t *testing.T) {
	e := newEnv(t)
	probers := []*Prober{e.prober(e.connect(), Config{Worker: "w1"}), e.prober(e.connect(), Config{Worker: "w2"})}
	o := observation{proxy: "p1", address: "127.0.0.2:3128", checkURL: e.echoURL, at: time.Now().UTC(),
		check: specCheck(1, 3, 100)}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				if _, _, _, err := probers[i%2].record(context.Background(), job{proxy: "p1"}, o); err == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	h, _ := e.health("p1")
	if int64(h.ConsecutiveSuccesses) != ok.Load() || ok.Load() == 0 {
		t.Fatalf("%d successful writes, record counts %d", ok.Load(), h.ConsecutiveSuccesses)
	}
	t.Logf("%d of 40 writes won", ok.Load())
}

// A proxy whose address appears before it listens (a booting VM) is retried within seconds
// until the probes have a verdict, not an interval later.
func TestFirstVerdictComesQuickly(t *testing.T) {
	e := newEnv(t)
	addr := closedAddr(t)
	e.putSpec("vm", spec{check: map[string]any{"intervalSeconds": 300, "failureThreshold": 5}})
	e.putStatus("vm", "local", "h1", addr)
	e.run(e.prober(nil, Config{}))
	eventually(t, 5*time.Second, "a first failed probe", func() bool { h, ok := e.health("vm"); return ok && h.ConsecutiveFailures > 0 })
	startForwardProxy(t, addr, "", "") // the proxy starts listening
	eventually(t, 10*time.Second, "healthy well within the 300 s interval", func() bool {
		h, ok := e.health("vm")
		return ok && h.Healthy
	})
}

// A replacement that got its predecessor's ip:port is probed at once and judged afresh: the
// record from before its address appeared is about the predecessor.
func TestReplacementAtTheSameAddressIsProbedAtOnce(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	e.putSpec("p1", spec{check: map[string]any{"intervalSeconds": 300}})
	old := events.ProxyHealth{V: 1, Proxy: "p1", Address: addr, Healthy: true, ConsecutiveSuccesses: 9, SuccessThreshold: 1,
		FailureThreshold: 3, LastProbeAt: time.Now().Add(-2 * time.Second).UTC()}
	b, _ := json.Marshal(old)
	if _, err := e.store.Health.Put(context.Background(), "p1", b); err != nil {
		t.Fatal(err)
	}
	e.putStatus("p1", "local", "h1", addr) // addressAt: now, after the old record's probe
	e.run(e.prober(nil, Config{}))
	eventually(t, 5*time.Second, "probed afresh", func() bool {
		h, ok := e.health("p1")
		return ok && h.ConsecutiveSuccesses == 1 && h.LastProbeAt.After(old.LastProbeAt)
	})
}

// A presence record that the server never expires (written here without a TTL, as one that a
// cluster's new stream leader failed to expire looked in the chaos test) must not keep its
// share of the fleet: once it is staleAfter past its last renewal, the live prober probes
// every proxy.
func TestUnexpiredPresenceOfADeadProberIsDropped(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	const n = 20
	for i := range n {
		proxy := fmt.Sprintf("p%d", i)
		e.putSpec(proxy, spec{check: map[string]any{"intervalSeconds": 1}})
		e.putStatus(proxy, "local", "h1", addr)
	}
	dead := events.ProberMember{V: 1, ID: "dead-member", Worker: "gone", Concurrency: 1, StartedAt: time.Now()}
	b, err := json.Marshal(dead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Probers.Put(context.Background(), dead.ID, b); err != nil {
		t.Fatal(err)
	}
	p := e.prober(nil, fast(Config{Worker: "w1"}))
	e.run(p)
	// While the record is believed, the dead member owns a share (about half of 20): the live
	// prober's own presence record reports owning fewer than all. Then, the dead record stale,
	// it owns and probes every proxy.
	owned := func() int {
		entries, err := kvstore.Latest(context.Background(), e.store.Probers)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			var m events.ProberMember
			if json.Unmarshal(en.Value(), &m) == nil && m.Worker == "w1" {
				return m.Owned
			}
		}
		return -1
	}
	eventually(t, 10*time.Second, "w1 reporting a share smaller than the fleet", func() bool { k := owned(); return k > 0 && k < n })
	probed := func() int {
		k := 0
		for i := range n {
			if h, ok := e.health(fmt.Sprintf("p%d", i)); ok && h.Prober == "w1" {
				k++
			}
		}
		return k
	}
	eventually(t, 30*time.Second, "w1 owning and probing every proxy once the dead record is stale", func() bool { return owned() == n && probed() == n })
}
