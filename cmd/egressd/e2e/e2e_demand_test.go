package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
)

// crowd is a number of crawlers that acquire with waits, hold each lease a moment and
// release it, in a loop, until stopped; it counts what they saw. Every request has an inbox of
// its own, and every answer to it is counted, so a request answered twice is seen.
type crowd struct {
	t       *testing.T
	nc      *nats.Conn
	body    func(i int) string
	hold    time.Duration
	wait    time.Duration // how long a crawler listens for an answer
	lossy   bool          // a request may go unanswered (its leaser was killed): try again
	prefix  string
	stop    chan struct{}
	wg      sync.WaitGroup
	held    atomic.Int64 // leases the crawlers hold now, by their own count
	peak    atomic.Int64
	granted atomic.Int64
	timeout atomic.Int64 // 503s at a wait's deadline
	lost    atomic.Int64 // requests nobody answered
	seq     atomic.Int64
	mu      sync.Mutex
	answers map[string]int
	waiting map[string]chan *nats.Msg
	errs    []string // anything else: a lease cut (released:false), an error
}

func startCrowd(t *testing.T, nc *nats.Conn, hold time.Duration, body func(i int) string) *crowd {
	c := &crowd{t: t, nc: nc, body: body, hold: hold, wait: 90 * time.Second, prefix: nats.NewInbox(), stop: make(chan struct{}),
		answers: map[string]int{}, waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(c.prefix+".>", func(m *nats.Msg) {
		c.mu.Lock()
		c.answers[m.Subject]++
		ch := c.waiting[m.Subject]
		delete(c.waiting, m.Subject)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// A test that fails before halt (a wait that timed out) still says what the crawlers saw:
	// a crawler that met an error stopped crawling, and its error is the likely cause.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the crowd: %s", c.report())
		}
	})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// run starts n crawlers.
func (c *crowd) run(n int) *crowd {
	for i := range n {
		c.wg.Go(func() { c.crawl(i) })
	}
	return c
}

// request sends data to subject and waits c.wait for the first answer.
func (c *crowd) request(subject string, data []byte) (*nats.Msg, error) {
	inbox := fmt.Sprintf("%s.%d", c.prefix, c.seq.Add(1))
	ch := make(chan *nats.Msg, 1)
	c.mu.Lock()
	c.waiting[inbox] = ch
	c.mu.Unlock()
	if err := c.nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-time.After(c.wait):
		c.mu.Lock()
		delete(c.waiting, inbox)
		c.mu.Unlock()
		return nil, nats.ErrTimeout
	}
}

func (c *crowd) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *crowd) crawl(i int) {
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		m, err := c.request(events.LeaseAcquireSubject, []byte(c.body(i)))
		if err != nil && c.lossy {
			c.lost.Add(1)
			continue
		}
		if err != nil {
			c.fail("crawler %d: acquire: %v", i, err)
			return
		}
		if m.Header.Get("Nats-Service-Error-Code") != "" {
			var er events.ErrorReply
			if json.Unmarshal(m.Data, &er) != nil || er.Error.Wait == nil || er.Error.Wait.Cause != events.WaitTimedOut {
				if c.lossy && er.Error.Wait != nil && er.Error.Wait.Cause == events.WaitStopped {
					continue
				}
				c.fail("crawler %d: %s", i, m.Data)
				return
			}
			c.timeout.Add(1)
			continue
		}
		var lr events.LeaseReply
		if err := json.Unmarshal(m.Data, &lr); err != nil || lr.Lease.ID == "" {
			c.fail("crawler %d: %s", i, m.Data)
			return
		}
		c.granted.Add(1)
		held := c.held.Add(1)
		for p := c.peak.Load(); held > p && !c.peak.CompareAndSwap(p, held); p = c.peak.Load() {
		}
		time.Sleep(c.hold) // the crawler's work, not a synchronisation
		c.held.Add(-1)
		if !c.release(i, lr.Lease.ID) {
			return
		}
	}
}

// release gives id back; with lossy, a release nobody answered is sent again.
func (c *crowd) release(i int, id string) bool {
	for retried := false; ; retried = true {
		rm, err := c.request(events.LeaseReleaseSubject, fmt.Appendf(nil, `{"id":%q}`, id))
		if err != nil && c.lossy {
			c.lost.Add(1)
			continue
		}
		var rr events.ReleaseReply
		if err == nil && json.Unmarshal(rm.Data, &rr) == nil && !rr.Released && retried {
			return true // the release nobody answered was done before its leaser died
		}
		if err != nil || json.Unmarshal(rm.Data, &rr) != nil || !rr.Released {
			// released:false: the service ended the lease before its holder gave it back.
			c.fail("crawler %d: release %s: %v %s", i, id, err, msgData(rm))
			return false
		}
		return true
	}
}

// report is what the crawlers saw so far, with the errors that stopped some of them.
func (c *crowd) report() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d granted, %d held now, %d waits timed out, %d unanswered, %d crawlers stopped by an error %q",
		c.granted.Load(), c.held.Load(), c.timeout.Load(), c.lost.Load(), len(c.errs), c.errs)
}

// answeredTwice lists the requests that had more than one answer.
func (c *crowd) answeredTwice() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for inbox, n := range c.answers {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s: %d answers", inbox, n))
		}
	}
	return out
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// halt stops the crawlers after their current acquire and waits for them.
func (c *crowd) halt() {
	close(c.stop)
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		c.t.Error(e)
	}
}

// putDemandPool puts the demand tests' pool, autoscale 0 to 5 members of maxLeases 2 that go
// after 5 s without demand, and waits until its controller has recorded it idle and a lease
// service replica serves (the crawlers come next, and one that meets no responders stops).
func putDemandPool(t *testing.T, n *node, name string) {
	t.Helper()
	nc, _ := n.client()
	waitLeaseService(t, nc, 1)
	n.nats("kv", "put", "pools", name, `{"template":{"provider":"local","maxLeases":2,`+poolHealth+`},`+
		`"autoscale":{"min":0,"max":5,"scaleDownAfterSeconds":5,"targetUtilization":1}}`)
	waitUntil(t, "the idle pool recorded at zero members", 60*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, name+": autoscale 0 to 5, wants 0"), out
	})
}

// appendConfig adds text to the node's config file.
func appendConfig(t testing.TB, cfg, text string) {
	t.Helper()
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// Issue 23, "Must be true": a demand step, 0 → 40 crawlers → 0, on an autoscaled local pool
// (max 5, maxLeases 2) with real processes. The crawlers acquire with waits: the pool grows to
// its max at the first passes that see them waiting (the members are then as fast as their
// boot), never above it, with never more than 10 leases held; every crawler's answer is a
// lease or the 503 of a wait at its deadline; every lease is given back by its crawler
// (released:true), none cut by a scale-down (one held through the ramp down keeps its member
// and works); after the step the pool drains to zero once
// scaleDownAfterSeconds pass without demand; the decisions are pool events with their inputs.
func TestPoolDemandStep(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := writeConfig(t, dir, 51)
	appendConfig(t, cfg, "leases:\n  demandWindow: 5s\n")
	n := startNode(t, dir, "--config", cfg)
	w := watchPool(t, n, "step")
	nc, _ := n.client()

	putDemandPool(t, n, "step")

	c := startCrowd(t, nc, 500*time.Millisecond, func(i int) string {
		return fmt.Sprintf(`{"selector":{"pool":"step"},"ttlSeconds":60,"waitSeconds":30,"holder":"crawler-%d"}`, i)
	}).run(40)
	n.waitRows("5 Ready members", 120*time.Second, poolReady("step", 5, nil))
	waitUntil(t, "crawlers served by the grown pool", 60*time.Second, func() (bool, string) {
		return c.granted.Load() >= 40, fmt.Sprint(c.granted.Load(), " granted")
	})
	up := scaleEvents(t, n, events.ReasonScaledUp)
	if len(up) == 0 || up[len(up)-1].To != 5 || up[len(up)-1].Inputs.Waiting == 0 && up[len(up)-1].Inputs.Refused == 0 {
		t.Fatalf("scale-ups %+v: want the last to 5, for waiting or refused acquires", up)
	}
	// One pass that sees the crowd asks for all of it: at most one step before it (a pass that
	// saw the first crawlers only).
	if len(up) > 2 {
		t.Errorf("%d scale-ups to reach 5, want at most 2: %+v", len(up), up)
	}
	// One crawler keeps its lease through the ramp down: the pool drains around it, and its
	// lease still works and is its own to give back.
	// It queues behind the crowd's waiters (about 30), so it may wait a few rounds of holds.
	m, err := c.request(events.LeaseAcquireSubject, []byte(`{"selector":{"pool":"step"},"ttlSeconds":120,"waitSeconds":30,"holder":"last"}`))
	var last events.LeaseReply
	if err != nil || json.Unmarshal(m.Data, &last) != nil || last.Lease.ID == "" {
		t.Fatalf("the last crawler's acquire: %v %s", err, msgData(m))
	}
	c.halt()
	n.waitRows("down to the leased member", 120*time.Second, func(rows map[string]fleet.Row) bool {
		ms := members(rows, "step")
		return len(ms) == 1 && ms[0].Name == last.Lease.Proxy && ms[0].Phase == events.PhaseReady
	})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	if code := curlVia(t, last.Lease.URL, web.URL); code != "200" {
		t.Fatalf("curl through the lease kept through the scale-down: HTTP %s", code)
	}
	if out := n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, last.Lease.ID)); !strings.Contains(out, `"released":true`) {
		t.Fatalf("the lease kept through the scale-down was cut: %s", out)
	}
	n.waitRows("no member left after scaleDownAfterSeconds without demand", 120*time.Second, func(rows map[string]fleet.Row) bool {
		return len(members(rows, "step")) == 0
	})
	waitUntil(t, "no forward-proxy process left", 30*time.Second, func() (bool, string) {
		p := proxyProcs(t, dir)
		return len(p) == 0, fmt.Sprint(p)
	})
	down := scaleEvents(t, n, events.ReasonScaledDown)
	if len(down) == 0 || down[len(down)-1].To != 0 {
		t.Fatalf("scale-downs %+v: want the last to 0", down)
	}
	evs := n.egressd("events", "--kind", "pool", "-f=false")
	if !strings.Contains(evs, "→ 5") || !strings.Contains(evs, "waiting") || !strings.Contains(evs, "→ 0") {
		t.Errorf("the pool's events lack the decisions with their inputs:\n%s", evs)
	}
	if highest, _ := w.stats(); highest > 5 {
		t.Errorf("the pool had %d members at one point; autoscale max is 5", highest)
	}
	for _, twice := range c.answeredTwice() {
		t.Errorf("a request answered twice: %s", twice)
	}
	if p := c.peak.Load(); p > 10 {
		t.Errorf("the crawlers held %d leases at once; 5 members of maxLeases 2 hold 10", p)
	}
	t.Logf("%d leases granted, %d waits timed out; scale-ups %+v, scale-downs %+v", c.granted.Load(), c.timeout.Load(), up, down)
}

// scaleEvents reads the pool events of reason, oldest first.
func scaleEvents(t *testing.T, n *node, reason events.Reason) []events.PoolScale {
	t.Helper()
	_, js := n.client()
	var out []events.PoolScale
	for _, ev := range readEvents(t, js, events.EventSubject(events.KindPool, ">")) {
		if ev.Reason == reason && ev.Pool != nil && ev.Pool.Scale != nil {
			out = append(out, *ev.Pool.Scale)
		}
	}
	return out
}
