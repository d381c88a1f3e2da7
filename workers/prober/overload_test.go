package prober

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// loadObserver keeps the highest backlog and lag the prober reported.
type loadObserver struct {
	noObserver
	mu              sync.Mutex
	maxBacklog      int
	maxLag, lastLag time.Duration
	lastBacklog     int
}

func (o *loadObserver) ObserveProberLoad(_, backlog int, lag time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.maxBacklog, o.maxLag = max(o.maxBacklog, backlog), max(o.maxLag, lag)
	o.lastBacklog, o.lastLag = backlog, lag
}

func (o *loadObserver) get() (maxBacklog int, maxLag time.Duration, backlog int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxBacklog, o.maxLag, o.lastBacklog
}

// A prober that cannot keep up drops nothing: it says it is behind (event, metrics), its late
// proxies are visibly overdue, and once capacity returns every proxy is probed and it says
// it caught up.
func TestOverloadIsVisibleAndRecovers(t *testing.T) {
	e := newEnv(t)
	sw, addr := startSwitchable(t, "127.0.0.7:0")
	const n = 12
	check := map[string]any{"intervalSeconds": 1, "timeoutSeconds": 1}
	for i := range n {
		proxy := fmt.Sprintf("p%d", i)
		e.putSpec(proxy, spec{check: check})
		e.putStatus(proxy, "local", "h1", addr)
	}
	obs := &loadObserver{}
	// One worker against proxies that hang for the whole 1 s timeout: one probe a second
	// for twelve proxies due every second.
	e.run(e.prober(nil, Config{Concurrency: 1, Observer: obs}))

	has := func(reason events.Reason) bool {
		for _, ev := range e.eventsOn(events.EventSubject(events.KindProber, "*")) {
			if ev.Reason == reason {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, "a ProberBehind event", func() bool { return has(events.ReasonProberBehind) })
	overdueAfter := events.ProbeOverdueAfter(time.Second)
	overdue := func() int {
		k := 0
		for i := range n {
			h, ok := e.health(fmt.Sprintf("p%d", i))
			// Without a record (it expired), the reference is when the address appeared:
			// at the start of the test.
			if !ok || time.Since(h.LastProbeAt) > overdueAfter {
				k++
			}
		}
		return k
	}
	start := time.Now()
	eventually(t, 20*time.Second, "overdue proxies", func() bool { return time.Since(start) > overdueAfter && overdue() > 0 })
	maxBacklog, maxLag, _ := obs.get()
	if maxBacklog < n/2 || maxLag < time.Second {
		t.Errorf("reported backlog %d and lag %v while behind", maxBacklog, maxLag)
	}
	t.Logf("behind: %d of %d overdue, backlog up to %d, lag up to %v", overdue(), n, maxBacklog, maxLag)

	sw.slow.Store(false) // capacity returns
	eventually(t, 20*time.Second, "every proxy probed healthy again", func() bool {
		for i := range n {
			h, ok := e.health(fmt.Sprintf("p%d", i))
			if !ok || !h.Healthy || time.Since(h.LastProbeAt) > 2*time.Second {
				return false
			}
		}
		return true
	})
	eventually(t, 10*time.Second, "a ProberCaughtUp event", func() bool { return has(events.ReasonProberCaughtUp) })
	// Caught up means nothing waits more than a tenth of an interval: one probe may still be
	// waiting at that instant, so the backlog is waited for, not read once.
	eventually(t, 10*time.Second, "the backlog drained", func() bool { _, _, backlog := obs.get(); return backlog == 0 })
}
