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
	"github.com/nats-io/nats.go/jetstream"
)

func TestFilters(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	e.run(e.prober(nil, Config{Worker: "only-a", Filters: []string{"a", "b.h2"}}))
	for _, proxy := range []string{"pa", "pb1", "pb2"} {
		e.putSpec(proxy, spec{})
	}
	nc := e.connect().JS.Conn()
	publish := func(proxy, provider, host string) {
		subj, data := request(t, proxy, provider, host, addr)
		if err := nc.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
	}
	// Published first, so that once the later ones are recorded these would have been too.
	publish("pb1", "b", "h1")
	publish("pb2", "b", "h2")
	publish("pa", "a", "h1")
	eventually(t, 5*time.Second, "a's and b.h2's probes recorded", func() bool {
		_, a := e.health("pa")
		_, b2 := e.health("pb2")
		return a && b2
	})
	time.Sleep(200 * time.Millisecond)
	if _, ok := e.health("pb1"); ok {
		t.Error("a prober limited to a and b.h2 took a probe of b.h1")
	}
}

func TestQueueGroupProbesOnce(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	e.run(e.prober(e.connect(), Config{Worker: "w1"}))
	e.run(e.prober(e.connect(), Config{Worker: "w2"}))

	ctx := context.Background()
	var writes atomic.Int64
	w, err := e.store.Health.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { w.Stop(); wg.Wait() })
	wg.Go(func() {
		for entry := range w.Updates() {
			if entry != nil && entry.Operation() == jetstream.KeyValuePut {
				writes.Add(1)
			}
		}
	})

	const n = 30
	nc := e.connect().JS.Conn()
	for i := range n {
		proxy := fmt.Sprintf("p%d", i)
		e.putSpec(proxy, spec{})
		subj, data := request(t, proxy, "local", "h1", addr)
		if err := nc.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "every probe recorded", func() bool { return writes.Load() >= n })
	time.Sleep(300 * time.Millisecond)
	if got := writes.Load(); got != n {
		t.Errorf("%d health writes for %d requests", got, n)
	}
	by := map[string]int{}
	for i := range n {
		h, ok := e.health(fmt.Sprintf("p%d", i))
		if !ok || h.ConsecutiveSuccesses != 1 {
			t.Errorf("p%d probed more or less than once: %+v", i, h)
		}
		by[h.Prober]++
	}
	t.Logf("probes per prober: %v", by)
}

func TestRunStopsWithProbesInFlight(t *testing.T) {
	e := newEnv(t)
	hole := blackHole(t)
	p := e.prober(nil, Config{})
	stop := e.run(p)
	e.putSpec("p1", spec{check: map[string]any{"intervalSeconds": 60, "timeoutSeconds": 60}})
	subj, data := request(t, "p1", "local", "h1", hole)
	if err := e.store.JS.Conn().Publish(subj, data); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "probe in flight", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.inFlight["p1"]
	})
	start := time.Now()
	stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if _, ok := e.health("p1"); ok {
		t.Error("a probe cut short by shutdown was recorded")
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

func TestDroppedRequests(t *testing.T) {
	e := newEnv(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	p := e.prober(nil, Config{})
	if _, err := e.store.Proxies.Put(context.Background(), "invalid", []byte(`{"v":1,"provider":"local","port":0,"bogus":1}`)); err != nil {
		t.Fatal(err)
	}
	e.putSpec("stale", spec{check: map[string]any{"intervalSeconds": 1}})
	e.putSpec("wrong-subject", spec{})
	for _, tc := range []struct {
		proxy string
		edit  func(subj string, data []byte) (string, []byte)
		log   string
	}{
		{"gone", nil, "proxy is gone"},
		{"invalid", nil, "spec is invalid"},
		{"stale", func(s string, d []byte) (string, []byte) {
			var req events.ProbeRequest
			if err := json.Unmarshal(d, &req); err != nil {
				t.Fatal(err)
			}
			req.At = req.At.Add(-time.Minute)
			d, _ = json.Marshal(req)
			return s, d
		}, "stale probe request"},
		{"wrong-subject", func(s string, d []byte) (string, []byte) {
			return events.ProbeSubject("other", "h1", "wrong-subject"), d
		}, "differ from the subject"},
		{"garbage", func(s string, d []byte) (string, []byte) { return s, []byte("{") }, "malformed probe request"},
	} {
		subj, data := request(t, tc.proxy, "local", "h1", addr)
		if tc.edit != nil {
			subj, data = tc.edit(subj, data)
		}
		before := len(e.logs.String())
		p.handle(context.Background(), subj, data)
		if h, ok := e.health(tc.proxy); ok {
			t.Errorf("%s: recorded %+v", tc.proxy, h)
		}
		if logged := e.logs.String()[before:]; !strings.Contains(logged, tc.log) {
			t.Errorf("%s: dropped without saying %q: %s", tc.proxy, tc.log, logged)
		}
	}
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
				if _, _, err := probers[i%2].record(context.Background(), o); err == nil {
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
