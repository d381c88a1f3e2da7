package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 23, "Must be true": 50 crawlers acquire with waits at once against a pool of 5
// members with maxLeases 2, each holding its lease a moment and releasing it. Whatever the
// machine's load, the order is what the server recorded: a waiter arrived when its wait.<id>
// record was written, and it was served when its lease's slot was created (the KV entries'
// timestamps, all on one server's clock).
func TestCrowdOfWaitersOnOneLeaser(t *testing.T)    { crowdOfWaiters(t, 1, 0) }
func TestCrowdOfWaitersOnThreeLeasers(t *testing.T) { crowdOfWaiters(t, 3, time.Second) }

// crowdLog is what a watch of lease_state and of the lease shards saw.
type crowdLog struct {
	mu       sync.Mutex
	arrived  map[string]time.Time // holder → its wait record written
	deadline map[string]time.Time // holder → its wait record's deadline
	granted  map[string]time.Time // holder → its slot created
	live     map[string]bool      // slot keys held now
	peak     int                  // the most slots held at once
	over     []string
}

func (c *crowdLog) wait(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut || !strings.HasPrefix(e.Key(), "wait.") {
		return
	}
	var w events.Waiter
	if json.Unmarshal(e.Value(), &w) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.arrived[w.Holder]; ok {
		c.over = append(c.over, "a second wait record for "+w.Holder) // requeued after a collection
		return
	}
	c.arrived[w.Holder], c.deadline[w.Holder] = e.Created(), w.Deadline
}

func (c *crowdLog) slot(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.live, e.Key())
		return
	}
	var l events.Lease
	if json.Unmarshal(e.Value(), &l) != nil || c.live[e.Key()] {
		return
	}
	c.live[e.Key()] = true
	c.peak = max(c.peak, len(c.live))
	if _, ok := c.granted[l.Holder]; ok {
		c.over = append(c.over, "a second lease for "+l.Holder)
	}
	c.granted[l.Holder] = e.Created()
}

// watchCrowd follows lease_state and the lease shards into c. A bucket keeps one entry per
// key, so a watch that lags would miss an entry superseded before it was delivered (a slot
// granted and released at once): the buckets keep every entry while the test runs.
func (r *rig) watchCrowd(ctx context.Context, c *crowdLog) {
	r.t.Helper()
	watch := func(kv jetstream.KeyValue, f func(jetstream.KeyValueEntry)) {
		s, err := r.store.JS.Stream(ctx, "KV_"+kv.Bucket())
		if err != nil {
			r.t.Fatal(err)
		}
		sc := s.CachedInfo().Config
		sc.MaxMsgsPerSubject = -1
		if _, err := r.store.JS.UpdateStream(ctx, sc); err != nil {
			r.t.Fatal(err)
		}
		w, err := kv.WatchAll(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		ready := make(chan struct{})
		go func() {
			defer w.Stop() //nolint:errcheck // the watch ends with the test
			for e := range w.Updates() {
				if e == nil {
					close(ready)
					continue
				}
				f(e)
			}
		}()
		<-ready
	}
	watch(r.store.LeaseState, c.wait)
	for _, kv := range r.store.Leases.All() {
		watch(kv, c.slot)
	}
}

func crowdOfWaiters(t *testing.T, leasers int, slack time.Duration) {
	const crawlers, members, maxLeases = 50, 5, 2
	r := newRig(t, nil)
	var ps []proxy
	for i := range members {
		ps = append(ps, proxy{name: fmt.Sprintf("web-%c", 'a'+i), pool: "web", attrs: map[string]string{"pool": "web"}, maxLeases: maxLeases})
	}
	r.seed(ps...)
	r.startLeasers(leasers)
	c := &crowdLog{arrived: map[string]time.Time{}, deadline: map[string]time.Time{}, granted: map[string]time.Time{}, live: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.watchCrowd(ctx, c)

	// The crawlers come over 2 s and each holds its lease 1 s: the queue grows to some 30,
	// and the last wait seconds. Every fifth waits 2 s only: it may get its lease or the 503
	// at its deadline.
	type answer struct {
		holder string
		rep    reply
		grant  events.LeaseGrant
		err    error
	}
	answers := make(chan answer, crawlers)
	var wg sync.WaitGroup
	for i := range crawlers {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 40 * time.Millisecond) // the load's shape, not a synchronisation
			req := events.AcquireRequest{Selector: map[string]string{"pool": "web"}, Holder: fmt.Sprintf("crawler-%02d", i),
				TTLSeconds: 60, WaitSeconds: 60}
			if i%5 == 4 {
				req.WaitSeconds = 2
			}
			data, _ := json.Marshal(req)
			m, err := r.nc.Request(events.LeaseAcquireSubject, data, 90*time.Second)
			if err != nil {
				answers <- answer{holder: req.Holder, err: err}
				return
			}
			a := answer{holder: req.Holder, rep: decodeReply(t, m)}
			if a.rep.code == 0 {
				var lr events.LeaseReply
				_ = json.Unmarshal(a.rep.body, &lr)
				a.grant = lr.Lease
				time.Sleep(time.Second) // the crawler's work, not a synchronisation
				a.err = r.releaseErr(a.grant.ID)
			}
			answers <- a
		})
	}
	wg.Wait()
	close(answers)

	got := map[string]answer{}
	for a := range answers {
		if _, twice := got[a.holder]; twice {
			t.Errorf("%s answered twice", a.holder)
		}
		got[a.holder] = a
		switch {
		case a.err != nil:
			t.Errorf("%s: %v", a.holder, a.err)
		case a.rep.code == 0 && a.grant.ID == "":
			t.Errorf("%s: a 200 without a lease: %s", a.holder, a.rep.body)
		case a.rep.code != 0 && (a.rep.code != events.CodeUnavailable || a.rep.err.Wait == nil || a.rep.err.Wait.Cause != events.WaitTimedOut):
			t.Errorf("%s: %d %s, want a lease or the 503 of a wait that timed out", a.holder, a.rep.code, a.rep.err.Message)
		}
	}
	if len(got) != crawlers {
		t.Fatalf("%d of %d crawlers answered", len(got), crawlers)
	}
	eventually(t, 30*time.Second, "every slot free", func() bool { return r.slots() == 0 })
	eventually(t, 30*time.Second, "no wait record left", func() bool { return r.waitRecords() == 0 })

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.over {
		t.Error(s)
	}
	if c.peak > members*maxLeases {
		t.Errorf("%d slots held at once; the pool's %d members hold %d", c.peak, members, members*maxLeases)
	}
	if n := r.keys(r.store.Proxies); n != members {
		t.Errorf("%d proxies, want the pool's %d", n, members)
	}
	for h, a := range got {
		if _, ok := c.granted[h]; ok != (a.rep.code == 0) {
			t.Errorf("%s: answered %d, slot seen %v", h, a.rep.code, ok)
		}
	}
	if len(c.arrived) < crawlers-members*maxLeases {
		t.Fatalf("only %d crawlers waited; the test needs at least %d to", len(c.arrived), crawlers-members*maxLeases)
	}
	if bad := overtaken(c, slack); len(bad) > 0 {
		t.Errorf("waiters overtaken (by one that arrived more than %v after them):\n%s", slack, strings.Join(bad, "\n"))
	}
}

// overtaken lists each waiter a that a later waiter b, arrived more than slack after a, was
// served before: while a was neither served nor past its deadline.
func overtaken(c *crowdLog, slack time.Duration) []string {
	waiters := make([]string, 0, len(c.arrived))
	for h := range c.arrived {
		waiters = append(waiters, h)
	}
	slices.SortFunc(waiters, func(x, y string) int { return c.arrived[x].Compare(c.arrived[y]) })
	var bad []string
	for i, a := range waiters {
		for _, b := range waiters[i+1:] {
			gb, ok := c.granted[b]
			if !ok || !c.arrived[b].After(c.arrived[a].Add(slack)) {
				continue
			}
			ga, servedA := c.granted[a]
			if servedA && ga.Before(gb) || !servedA && c.deadline[a].Before(gb) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s (arrived %s) overtaken by %s (arrived %s, served %s)", a,
				c.arrived[a].Format("15:04:05.000000"), b, c.arrived[b].Format("15:04:05.000000"), gb.Format("15:04:05.000000")))
		}
	}
	return bad
}

// releaseErr releases id, from any goroutine.
func (r *rig) releaseErr(id string) error {
	data, _ := json.Marshal(events.ReleaseRequest{ID: id})
	m, err := r.nc.Request(events.LeaseReleaseSubject, data, 30*time.Second)
	if err != nil {
		return fmt.Errorf("release %s: %w", id, err)
	}
	var rr events.ReleaseReply
	if err := json.Unmarshal(m.Data, &rr); err != nil || !rr.Released {
		return fmt.Errorf("release %s: not released: %s", id, m.Data)
	}
	return nil
}
