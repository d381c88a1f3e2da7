package prober

import (
	"sync"
	"time"
)

func (l *loop) takeNudges(now time.Time) {
	for _, name := range l.nudges.take() {
		l.nudge(name, now)
	}
}

// nudge asks for a probe of name now (a probe-now request).
func (l *loop) nudge(name string, now time.Time) {
	t := l.targets[name]
	if t == nil {
		l.p.log.Debug("probe request for a proxy this prober does not know; dropped", "proxy", name)
		return
	}
	if addr, _, _ := probeAddr(t); addr == "" {
		l.p.log.Debug("probe request for a proxy that has no address to probe; dropped", "proxy", name)
		return
	}
	t.nudged = true
	l.refresh(t, now)
}

// nudges collects probe-now requests from the subscription's goroutine for the loop,
// without ever blocking the NATS client or dropping a request: a set plus a signal.
type nudges struct {
	mu     sync.Mutex
	names  map[string]bool
	signal chan struct{}
}

func (n *nudges) add(name string) {
	n.mu.Lock()
	n.names[name] = true
	n.mu.Unlock()
	select {
	case n.signal <- struct{}{}:
	default:
	}
}

func (n *nudges) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.names))
	for name := range n.names {
		out = append(out, name)
		delete(n.names, name)
	}
	return out
}
