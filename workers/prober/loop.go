package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// target is what the loop knows of one proxy: the parts of its spec, status and health that
// probing needs, and its place in the schedule.
type target struct {
	name   string
	spec   *probeSpec // nil: no valid spec
	st     *where     // nil: no status
	health *events.ProxyHealth
	rev    uint64 // revision of health; 0 when there is none

	creds   schemas.InstanceAuth // the auth its current instance carries (decision 87)
	owned   bool                 // this prober's share
	addr    string               // host:port the schedule is for
	gen     uint64               // slots of another generation are stale
	due     time.Time            // zero while not scheduled
	running bool
	nudged  bool // a probe-now request waits for it
}

// probeSpec is the part of a spec that probing needs. The rest (user-data, attributes …)
// would only cost memory in every prober, ten thousand times over.
type probeSpec struct {
	check schemas.HealthCheck
	// expectedEgress is an external endpoint's endpoint.expectedEgress, "" when it has none.
	expectedEgress string
}

func probeSpecOf(s schemas.ProxySpec) *probeSpec {
	ps := &probeSpec{check: s.HealthCheck}
	if s.Mode == schemas.ModeExternal && s.Endpoint != nil {
		ps.expectedEgress = s.Endpoint.ExpectedEgress
	}
	return ps
}

// where is the part of a status that probing needs: the address to probe ("" when there is
// none, or the instance is going away) and the provider and host it counts on.
type where struct {
	addr, provider, host string
	since                time.Time // when the address appeared (ProxyStatus.AddressAt)
	expectedEgress       string    // see statusExpectedEgress
	generation           string    // the instance's, which its lease key derives from
	authRevision         uint64    // the spec revision whose auth the instance carries (0: the spec's)
}

func whereOf(st events.ProxyStatus) *where {
	w := &where{provider: st.Provider, host: st.Host, since: st.AddressAt, expectedEgress: statusExpectedEgress(st),
		generation: st.Generation, authRevision: st.AuthRevision}
	if st.Mode == schemas.ModeExternal {
		w.provider, w.host = events.External, events.External
	}
	if st.Port != 0 && st.Teardown == "" {
		w.addr = st.Address()
	}
	return w
}

// loop owns the schedule. One goroutine (run) reads and writes all of it; workers get jobs
// by value and report completions on a channel.
type loop struct {
	p       *Prober
	targets map[string]*target
	mem     members
	heap    dueHeap
	owned   int
	idle    int
	jobs    chan job
	done    chan completion
	nudges  nudges
	behind  bool

	watchers                          []*kvstore.Watch
	specW, statusW, healthW, membersW *kvstore.Watch

	mu   sync.Mutex // guards last, read by the presence goroutine
	last load
}

func (p *Prober) newLoop(ctx context.Context) (*loop, error) {
	l := &loop{p: p, targets: map[string]*target{}, idle: p.cfg.Concurrency,
		jobs: make(chan job, p.cfg.Concurrency), done: make(chan completion, p.cfg.Concurrency),
		mem:    members{self: p.member, others: map[string]events.ProberMember{}},
		nudges: nudges{signal: make(chan struct{}, 1), names: map[string]bool{}}}
	s := p.cfg.Buckets
	for _, w := range []struct {
		dst *(*kvstore.Watch)
		kv  jetstream.KeyValue
	}{{&l.specW, s.Proxies}, {&l.statusW, s.Status}, {&l.healthW, s.Health}, {&l.membersW, s.Probers}} {
		kw, err := kvstore.WatchBucket(ctx, w.kv)
		if err != nil {
			l.stopWatches()
			return nil, fmt.Errorf("prober: %w", err)
		}
		*w.dst = kw
		l.watchers = append(l.watchers, kw)
	}
	return l, nil
}

func (l *loop) stopWatches() {
	for _, w := range l.watchers {
		_ = w.Stop()
	}
}

// run applies watch updates, probe-now requests and completions, and hands due probes to
// idle workers, until ctx ends. Probing starts only once every watch has delivered its
// initial values, so a starting prober knows the other probers and the last probes before
// it decides what is its and what is due.
func (l *loop) run(ctx context.Context) error {
	p := l.p
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stats := time.NewTicker(time.Second)
	defer stats.Stop()
	started := false
	for {
		now := p.cfg.Now()
		if !started && l.synced() {
			started = true
			for _, t := range l.targets {
				l.refresh(t, now)
			}
			close(p.ready)
			l.takeNudges(now)
			p.log.Info("prober started", "subjects", p.subjects, "concurrency", p.cfg.Concurrency,
				"probers", len(l.mem.others)+1, "owned", l.owned, "proxies", len(l.targets))
		}
		if started {
			l.dispatch(now)
			l.arm(timer, now)
		}
		var (
			e   jetstream.KeyValueEntry
			ok  bool
			src *kvstore.Watch
		)
		select {
		case <-ctx.Done():
			return nil
		case e, ok = <-l.specW.Updates():
			src = l.specW
		case e, ok = <-l.statusW.Updates():
			src = l.statusW
		case e, ok = <-l.healthW.Updates():
			src = l.healthW
		case e, ok = <-l.membersW.Updates():
			src = l.membersW
		case c := <-l.done:
			l.complete(c, p.cfg.Now())
			continue
		case <-l.nudges.signal:
			if started { // before, they wait in the set for the start
				l.takeNudges(p.cfg.Now())
			}
			continue
		case <-timer.C:
			continue
		case <-stats.C:
			// The wall clock, not cfg.Now: it is compared with the server's timestamps.
			if l.mem.prune(time.Now(), staleAfter(p.cfg.MemberTTL)) && started {
				now := p.cfg.Now()
				for _, t := range l.targets {
					l.refresh(t, now)
				}
			}
			l.sample(ctx, p.cfg.Now())
			continue
		}
		c, err := src.Take(e, ok)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil // the watches end with ctx
		case err != nil:
			return fmt.Errorf("prober: %w", err)
		case !c.Synced:
			l.apply(ctx, src, c, started, p.cfg.Now())
		}
	}
}

// synced reports whether every watch has delivered its initial values.
func (l *loop) synced() bool {
	for _, w := range l.watchers {
		if !w.Synced() {
			return false
		}
	}
	return true
}

// arm sets the timer to the next due slot, when a worker is free to take it.
func (l *loop) arm(timer *time.Timer, now time.Time) {
	if l.idle == 0 || len(l.heap) == 0 {
		return
	}
	timer.Reset(max(l.heap[0].due.Sub(now), 0))
}

// apply folds one watch entry into the targets (and, for members, the ownership).
func (l *loop) apply(ctx context.Context, src *kvstore.Watch, c kvstore.Change, started bool, now time.Time) {
	e := c.Entry
	if src == l.membersW {
		if l.mem.apply(e) && started {
			for _, t := range l.targets {
				l.refresh(t, now)
			}
		}
		return
	}
	name := e.Key()
	t := l.targets[name]
	if t == nil {
		t = &target{name: name}
		l.targets[name] = t
	}
	put := !c.Removed
	switch src {
	case l.specW:
		t.spec = nil
		var auth *schemas.Auth
		if put {
			if s, err := schemas.ParseProxySpec(e.Value()); err == nil {
				t.spec, auth = probeSpecOf(s), s.Auth
			}
		}
		t.creds.SetSpec(e.Revision(), auth)
	case l.statusW:
		t.st = nil
		if put {
			var st events.ProxyStatus
			if json.Unmarshal(e.Value(), &st) == nil {
				t.st = whereOf(st)
			}
		}
		l.followAuth(ctx, t)
	case l.healthW:
		if e.Revision() < t.rev && put {
			return // older than what this prober itself wrote since
		}
		t.health, t.rev = nil, 0
		if put {
			var h events.ProxyHealth
			if json.Unmarshal(e.Value(), &h) == nil {
				t.health, t.rev = &h, e.Revision()
			}
		}
		l.forget(t)
		return // health from elsewhere moves no schedule
	}
	if started {
		l.refresh(t, now)
	}
}

// statusExpectedEgress is the address a managed proxy's traffic should leave from as its
// status tells it (ProxyStatus.ExpectedEgress: the reconciler records the provider's
// Instance.EgressIP, e.g. the local provider's own address with bindSource), "" when the
// status does not know.
func statusExpectedEgress(st events.ProxyStatus) string { return st.ExpectedEgress }

// expectedEgress is the address the probes should see t's traffic come from, "" when it is
// not known: the spec's (an external endpoint's expectedEgress) first, else the status's.
func expectedEgress(t *target) string {
	if t.spec != nil && t.spec.expectedEgress != "" {
		return t.spec.expectedEgress
	}
	if t.st != nil {
		return t.st.expectedEgress
	}
	return ""
}

// probeAddr is where target is to be probed and on which provider and host it counts, or ""
// when it is not to be probed: no valid spec, no address, or its instance is going away.
func probeAddr(t *target) (addr, provider, host string) {
	if t.spec == nil || t.st == nil || t.st.addr == "" {
		return "", "", ""
	}
	return t.st.addr, t.st.provider, t.st.host
}

// current is the target's health record if it is about the instance at its address now
// (events.ProxyHealth.About), or nil.
func (t *target) current() *events.ProxyHealth {
	if t.st == nil || !t.health.About(t.st.addr, t.st.since) {
		return nil
	}
	return t.health
}

func interval(t *target) time.Duration { return seconds(t.spec.check.IntervalSeconds) }

// refresh brings target's ownership and schedule in line with what is known of it.
func (l *loop) refresh(t *target, now time.Time) {
	addr, provider, host := probeAddr(t)
	mine := addr != "" && takes(l.p.cfg.Filters, provider, host) && l.mem.owns(t.name, provider, host)
	if mine != t.owned {
		t.owned = mine
		if mine {
			l.owned++
			t.addr = "" // scheduled afresh below, from its last probe
		} else {
			l.owned--
		}
	}
	if !mine && !(t.nudged && addr != "") {
		t.gen, t.due, t.addr, t.nudged = t.gen+1, time.Time{}, "", false
		l.forget(t)
		return
	}
	if t.running {
		return // its completion reschedules it
	}
	iv := interval(t)
	switch {
	case t.nudged:
		if t.due.IsZero() || t.due.After(now) {
			t.addr = addr
			l.schedule(t, now)
		}
	case t.addr != addr:
		// New to this prober, or a new address: probe at once unless the last probe at this
		// address is recent, then keep its cadence.
		t.addr = addr
		due := now
		if h := t.current(); h != nil && !h.LastProbeAt.IsZero() {
			if next := after(t.name, iv, h.LastProbeAt); next.After(now) {
				due = next
			}
		}
		l.schedule(t, due)
	case t.due.IsZero():
		l.schedule(t, next(t, iv, now)) // just probed
	case t.due.After(now.Add(iv + iv/2)):
		l.schedule(t, after(t.name, iv, now)) // the interval was shortened
	}
}

// next is when a proxy probed just now is due again. Until the probes have a verdict on its
// address they retry after 1, 2, 4 … s (at most the interval): a VM's address often appears
// a moment before its proxy listens, and that first failure should not cost a whole interval
// of a proxy that is about to be Ready. With a verdict, the proxy keeps its phase.
func next(t *target, iv time.Duration, now time.Time) time.Time {
	if h := t.current(); h == nil || !h.Judged() {
		k := 0
		if h != nil {
			k = min(h.ConsecutiveFailures, 16)
		}
		if d := time.Second << k; d < iv {
			return now.Add(d)
		}
	}
	return after(t.name, iv, now)
}

// forget drops a target nothing is known of any more (its spec, status and health are all
// gone), so a fleet's churn does not accumulate.
func (l *loop) forget(t *target) {
	if t.spec == nil && t.st == nil && t.health == nil && !t.running && !t.owned {
		delete(l.targets, t.name)
	}
}

func (l *loop) schedule(t *target, due time.Time) {
	t.gen++
	t.due = due
	l.heap.push(slot{due: due, name: t.name, gen: t.gen})
}

// dispatch hands every due slot to a free worker, most overdue first.
func (l *loop) dispatch(now time.Time) {
	for l.idle > 0 && len(l.heap) > 0 && !l.heap[0].due.After(now) {
		s := l.heap.pop()
		t := l.targets[s.name]
		if t == nil || s.gen != t.gen || t.running || t.due.IsZero() {
			continue // stale
		}
		l.p.cfg.Observer.ObserveProbeDelay(now.Sub(s.due))
		t.running, t.due, t.nudged = true, time.Time{}, false
		l.idle--
		l.jobs <- l.p.newJob(t)
	}
}

// complete takes a worker's report and schedules the target's next probe.
func (l *loop) complete(c completion, now time.Time) {
	l.idle++
	t := l.targets[c.proxy]
	if t == nil {
		return
	}
	t.running = false
	if c.health != nil && c.rev > t.rev {
		t.health, t.rev = c.health, c.rev
	}
	l.refresh(t, now)
}
