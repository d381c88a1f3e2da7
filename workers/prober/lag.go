package prober

import (
	"container/heap"
	"context"
	"time"

	"github.com/egressd/egressd/events"
)

// sample measures how far behind the schedule this prober is, reports it, and announces
// when it falls behind (its oldest waiting probe is more than half an interval late, so the
// spread is lost) or catches up again (nothing waits more than a tenth of an interval).
func (l *loop) sample(ctx context.Context, now time.Time) {
	l.dispatch(now) // what is due now and has a worker is not backlog
	l.compact()
	backlog, lag := 0, time.Duration(0)
	var lagIv time.Duration
	for _, s := range l.heap {
		t := l.targets[s.name]
		if t == nil || s.gen != t.gen || t.due.IsZero() || s.due.After(now) {
			continue
		}
		backlog++
		if d := now.Sub(s.due); d > lag {
			lag, lagIv = d, interval(t)
		}
	}
	l.mu.Lock()
	l.last = load{owned: l.owned, backlog: backlog, lag: lag}
	l.mu.Unlock()
	l.p.cfg.Observer.ObserveProberLoad(l.owned, backlog, lag)
	switch {
	case !l.behind && backlog > 0 && lag > max(lagIv/2, time.Second):
		l.behind = true
		l.p.announceLag(ctx, events.ReasonProberBehind, l.last)
	case l.behind && (backlog == 0 || lag <= lagIv/10):
		l.behind = false
		l.p.announceLag(ctx, events.ReasonProberCaughtUp, l.last)
	}
}

// compact drops stale slots once they outnumber the live ones: every reschedule leaves one
// behind until it comes due, and ownership that moves back and forth leaves many.
func (l *loop) compact() {
	if len(l.heap) <= 2*l.owned+64 {
		return
	}
	live := l.heap[:0]
	for _, s := range l.heap {
		if t := l.targets[s.name]; t != nil && s.gen == t.gen && !t.due.IsZero() {
			live = append(live, s)
		}
	}
	clear(l.heap[len(live):])
	l.heap = live
	heap.Init(&l.heap)
}

// currentLoad is the last sample, for the presence record.
func (l *loop) currentLoad() load {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
