package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// echoSwitch is an echo endpoint that can be stopped and started again on its address.
type echoSwitch struct {
	t      *testing.T
	addr   string
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func startEchoSwitch(t *testing.T) *echoSwitch {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoSwitch{t: t, addr: ln.Addr().String()}
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *echoSwitch) serve(ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ServeEcho(ctx, ln) }()
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
}

func (s *echoSwitch) stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (s *echoSwitch) start() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(ln)
}

// A prober whose echo endpoint stops answering it marks no proxy unhealthy: it records no
// failed probe, says so (a ProbePathDown event, its presence record), and once the endpoint
// is back it says that too and probes the fleet healthy again, on the same records.
func TestProbePathDownJudgesNoProxy(t *testing.T) {
	e := newEnv(t)
	echo := startEchoSwitch(t)
	addr, _ := startForwardProxy(t, "127.0.0.2:0", "", "")
	const n = 4
	check := map[string]any{"intervalSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}
	for i := range n {
		e.putSpec(fmt.Sprintf("p%d", i), spec{check: check})
		e.putStatus(fmt.Sprintf("p%d", i), "local", "h1", addr)
	}
	obs := &failCounter{}
	p := e.prober(nil, Config{DefaultCheckURL: "http://" + echo.addr + "/", Observer: obs})
	e.run(p)
	allHealthy := func() bool {
		for i := range n {
			if h, ok := e.health(fmt.Sprintf("p%d", i)); !ok || !h.Healthy || h.ConsecutiveFailures != 0 {
				return false
			}
		}
		return true
	}
	eventually(t, 10*time.Second, "every proxy probed healthy", allHealthy)

	// Every write to proxy_health from here on, to find any failure recorded.
	wctx, stopWatch := context.WithCancel(context.Background())
	w, err := kvstore.WatchBucket(wctx, e.store.Health)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failures []string
	followed := make(chan struct{})
	defer func() { stopWatch(); <-followed }()
	go func() {
		defer close(followed)
		_ = w.Follow(wctx, func(en jetstream.KeyValueEntry) {
			var h events.ProxyHealth
			if json.Unmarshal(en.Value(), &h) == nil && (h.ConsecutiveFailures > 0 || !h.Healthy) {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %d failures, healthy %v (%s)", h.Proxy, h.ConsecutiveFailures, h.Healthy, h.LastError))
				mu.Unlock()
			}
		}, nil)
	}()

	echo.stop()
	has := func(reason events.Reason) bool {
		for _, ev := range e.eventsOn(events.EventSubject(events.KindProber, "*")) {
			if ev.Reason == reason {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, "a ProbePathDown event", func() bool { return has(events.ReasonProbePathDown) })
	eventually(t, 10*time.Second, "the presence record saying the probe path is down", func() bool {
		en, err := e.store.Probers.Get(context.Background(), p.member.ID)
		var m events.ProberMember
		return err == nil && json.Unmarshal(en.Value(), &m) == nil && m.ProbePathDown
	})
	// Three failed probes of each proxy with the path down: a prober without the sentinel
	// would have recorded each (failure threshold 1).
	base := obs.failed()
	eventually(t, 20*time.Second, "three failed probes a proxy", func() bool { return obs.failed()-base >= 3*n })

	echo.start()
	eventually(t, 10*time.Second, "a ProbePathRestored event", func() bool { return has(events.ReasonProbePathRestored) })
	eventually(t, 10*time.Second, "every proxy probed healthy again", allHealthy)
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("failed probes recorded while the probe path was down: %q", failures)
	}
}

// failCounter counts the probes that failed (an Observer).
type failCounter struct {
	noObserver
	mu sync.Mutex
	n  int
}

func (f *failCounter) ObserveProbe(ok bool, _ time.Duration) {
	if !ok {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
	}
}

func (f *failCounter) failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
