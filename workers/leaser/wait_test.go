package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go"
)

// waitRecords counts the waiting acquires' records (wait.<id>) in lease_state.
func (r *rig) waitRecords() int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := r.store.LeaseState.ListKeys(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for k := range l.Keys() {
		if strings.HasPrefix(k, "wait.") {
			n++
		}
	}
	return n
}

// numbered is the answer to the i-th request.
type numbered struct {
	i     int
	rep   reply
	grant events.LeaseGrant
}

// postAsync sends an acquire to the HTTP face of replica i%2 in a goroutine and delivers its
// answer, numbered n, on out. ctx ends the request early (the crawler hangs up).
func (hr *httpRig) postAsync(ctx context.Context, n int, body string, out chan<- numbered) {
	hr.mu.Lock()
	addr := hr.addrs[n%len(hr.addrs)]
	hr.mu.Unlock()
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+leaser.HTTPPathPrefix+"acquire", strings.NewReader(body))
		if err != nil {
			out <- numbered{i: n, rep: reply{code: -1, header: err.Error()}}
			return
		}
		req.Header.Set("Authorization", "Bearer "+httpToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- numbered{i: n, rep: reply{code: -1, header: err.Error()}}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res := numbered{i: n, rep: reply{body: b}}
		if resp.StatusCode != http.StatusOK {
			res.rep.code = events.ErrorCode(resp.StatusCode)
			var er events.ErrorReply
			_ = json.Unmarshal(b, &er)
			res.rep.err = er.Error
		} else {
			var lr events.LeaseReply
			_ = json.Unmarshal(b, &lr)
			res.grant = lr.Lease
		}
		out <- res
	}()
}

func next(t *testing.T, ch <-chan numbered, what string) numbered {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30s", what)
	}
	return numbered{}
}

// Issue 23 item 1: three proxies with maxLeases 1 and ten acquires with waitSeconds, sent in
// turn to two leaser replicas: three are granted at once, the seven others wait, and each
// release hands its slot to the oldest waiter, whichever replica holds it, never to a later
// one, never over the cap.
func TestWaitingAcquiresAreGrantedInArrivalOrderAcrossReplicas(t *testing.T) {
	hr := newHTTPRig(t, nil)
	hr.seed(proxy{name: "px-a", maxLeases: 1}, proxy{name: "px-b", maxLeases: 1}, proxy{name: "px-c", maxLeases: 1})
	hr.startLeasers(2)

	out := make(chan numbered, 10)
	body := `{"waitSeconds":60,"ttlSeconds":60}`
	var held []events.LeaseGrant
	for i := range 10 {
		hr.postAsync(context.Background(), i, body, out)
		if i < 3 {
			a := next(t, out, fmt.Sprintf("acquire %d", i))
			if a.rep.code != 0 || a.i != i {
				t.Fatalf("acquire %d: answer %d: %d %s", i, a.i, a.rep.code, a.rep.err.Message)
			}
			held = append(held, a.grant)
			continue
		}
		// The next is sent once this one waits: arrival order is then the order sent.
		eventually(t, 30*time.Second, fmt.Sprintf("acquire %d waiting", i), func() bool { return hr.waitRecords() == i-2 })
	}
	for want := 3; want < 10; want++ {
		select {
		case a := <-out:
			t.Fatalf("acquire %d answered before a slot was free: %d %s", a.i, a.rep.code, a.rep.err.Message)
		default:
		}
		if !hr.release(held[0].ID) {
			t.Fatalf("release %s: not released", held[0].ID)
		}
		held = held[1:]
		a := next(t, out, fmt.Sprintf("the waiter %d", want))
		if a.rep.code != 0 {
			t.Fatalf("waiter %d: %d %s", a.i, a.rep.code, a.rep.err.Message)
		}
		if a.i != want {
			t.Fatalf("a slot freed went to waiter %d; waiter %d came first", a.i, want)
		}
		held = append(held, a.grant)
		if n := hr.slots(); n > 3 {
			t.Fatalf("%d slots held, over the fleet's 3", n)
		}
	}
	eventually(t, 30*time.Second, "no waiter records left", func() bool { return hr.waitRecords() == 0 })
	if n := hr.obs.count("acquire/granted"); n != 10 {
		t.Errorf("%d acquires counted granted, want 10", n)
	}
	if n, w := hr.obs.count("wait/granted"), hr.obs.count("waiting"); n != 7 || w != 0 {
		t.Errorf("%d waits counted granted (want 7), %d still counted waiting (want 0)", n, w)
	}
}

// An acquire that waits in vain gets the 503 with the numbers of a refusal plus how long it
// waited, its place and why; and it leaves no record. A caller's own timeout (the reply
// timeout header) shortens the wait: the answer comes before the caller stops listening.
func TestWaitingAcquireDeadline(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 1})
	r.startLeasers(1)
	r.mustAcquire(events.AcquireRequest{TTLSeconds: 60})

	_, rep := r.acquire(events.AcquireRequest{WaitSeconds: 1})
	if rep.code != events.CodeUnavailable || rep.err.Wait == nil {
		t.Fatalf("after its wait: %d %s (wait %+v), want 503 with the wait", rep.code, rep.err.Message, rep.err.Wait)
	}
	w := rep.err.Wait
	if w.Cause != events.WaitTimedOut || w.WaitedSeconds < 0.9 || w.Position != 1 || w.Waiting != 1 || w.Until == nil {
		t.Errorf("wait detail %+v", *w)
	}
	if av := rep.err.Availability; av == nil || av.AtCapacity != 1 || av.Matched != 1 {
		t.Errorf("availability %+v", av)
	}
	if !strings.Contains(rep.err.Message, "after waiting") || !strings.Contains(rep.err.Message, "place 1 of 1") {
		t.Errorf("message %q", rep.err.Message)
	}

	// waitSeconds 60, but the caller listens 3 s: a 503 comes, not silence.
	data, _ := json.Marshal(events.AcquireRequest{WaitSeconds: 60})
	m := nats.NewMsg(events.LeaseAcquireSubject)
	m.Data = data
	m.Header.Set(events.ReplyTimeoutHeader, "3000")
	msg, err := r.nc.RequestMsg(m, 3*time.Second)
	if err != nil {
		t.Fatalf("a waiting acquire with a 3s caller timeout: %v", err)
	}
	if rep := decodeReply(t, msg); rep.code != events.CodeUnavailable || rep.err.Wait == nil || rep.err.Wait.WaitedSeconds > 3 {
		t.Fatalf("answer %d %s", rep.code, rep.err.Message)
	}
	eventually(t, 30*time.Second, "no waiter records left", func() bool { return r.waitRecords() == 0 })
}

// waitSeconds out of bounds, on a leaser that holds no acquires, and a bad reply timeout
// header: 400 naming the field, and nothing queued.
func TestBadWaitSeconds(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.MaxWait = 20 * time.Second })
	r.seed(proxy{name: "px-a", maxLeases: 1})
	r.startLeasers(1)
	for _, c := range []struct {
		body, says string
	}{
		{`{"waitSeconds":-1}`, "between 0"},
		{`{"waitSeconds":21}`, "at most 20 (the leaser's leases.maxWaitSeconds)"},
		{`{"waitSeconds":1e3}`, "waitSeconds"},
		{`{"waitSeconds":"5"}`, "waitSeconds"},
		{`{"waitseconds":5}`, "waitseconds"},
	} {
		rep := r.call(events.LeaseAcquireSubject, []byte(c.body))
		if rep.code != events.CodeBadRequest || !strings.Contains(rep.err.Message, c.says) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.body, rep.code, rep.err.Message, c.says)
		}
	}
	m := nats.NewMsg(events.LeaseAcquireSubject)
	m.Data = []byte(`{"waitSeconds":5}`)
	for _, h := range []string{"soon", "0", "-5", "99999999999"} {
		m.Header.Set(events.ReplyTimeoutHeader, h)
		msg, err := r.nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rep := decodeReply(t, msg); rep.code != events.CodeBadRequest || rep.err.Field != events.ReplyTimeoutHeader {
			t.Errorf("header %q: %d %s (field %q)", h, rep.code, rep.err.Message, rep.err.Field)
		}
	}
	if n := r.waitRecords(); n != 0 || r.slots() != 0 {
		t.Errorf("%d waiter records and %d slots after bad requests", n, r.slots())
	}

	off := newRig(t, func(c *leaser.Config) { c.MaxWait = leaser.WaitsOff })
	off.seed(proxy{name: "px-a", maxLeases: 1})
	off.startLeasers(1)
	if rep := off.call(events.LeaseAcquireSubject, []byte(`{"waitSeconds":1}`)); rep.code != events.CodeBadRequest || rep.err.Field != "waitSeconds" {
		t.Errorf("waits off: %d %s", rep.code, rep.err.Message)
	}
	if _, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(off.store), NC: off.nc, MaxWait: leaser.MaxWaitLimit + time.Second}); err == nil {
		t.Error("a MaxWait over MaxWaitLimit was accepted")
	}
}

// A replica killed with a waiter (cut off from NATS: it neither answers nor cleans up) does
// not hold back the waiters of the others: once its heartbeat has lapsed its waiter is
// skipped, and its record removed.
func TestKilledReplicasWaitersDoNotBlockOthers(t *testing.T) {
	hr := newHTTPRig(t, nil)
	hr.seed(proxy{name: "px-a", maxLeases: 1})
	hr.startLeasers(2)
	first := hr.mustAcquire(events.AcquireRequest{TTLSeconds: 60})

	out := make(chan numbered, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hr.postAsync(ctx, 0, `{"waitSeconds":60}`, out) // replica 0, the older waiter
	eventually(t, 30*time.Second, "the first waiter queued", func() bool { return hr.waitRecords() == 1 })
	hr.postAsync(context.Background(), 1, `{"waitSeconds":60}`, out) // replica 1
	eventually(t, 30*time.Second, "the second waiter queued", func() bool { return hr.waitRecords() == 2 })

	hr.kill(0)
	if !hr.release(first.ID) {
		t.Fatal("not released")
	}
	// Cut off, replica 0 may still tell its own caller that it stopped (in this process its
	// HTTP face outlives its NATS connection); it cannot grant anything.
	a := next(t, out, "the live replica's waiter")
	if a.i == 0 {
		if a.rep.code == 0 {
			t.Fatalf("the killed replica granted %s", a.grant.ID)
		}
		a = next(t, out, "the live replica's waiter")
	}
	if a.i != 1 || a.rep.code != 0 {
		t.Fatalf("answer to %d: %d %s", a.i, a.rep.code, a.rep.err.Message)
	}
	eventually(t, 30*time.Second, "the killed replica's waiter record removed", func() bool { return hr.waitRecords() == 0 })
	if n := hr.slots(); n != 1 {
		t.Errorf("%d slots held, want the one granted", n)
	}
}

// A waiter whose HTTP caller hangs up leaves the queue, and a slot freed afterwards is not
// taken for it: the next acquire gets it.
func TestWaiterWhoseCallerLeftHoldsNoSlot(t *testing.T) {
	hr := newHTTPRig(t, nil)
	hr.seed(proxy{name: "px-a", maxLeases: 1})
	hr.startLeasers(1)
	first := hr.mustAcquire(events.AcquireRequest{TTLSeconds: 60})

	out := make(chan numbered, 1)
	ctx, cancel := context.WithCancel(context.Background())
	hr.postAsync(ctx, 0, `{"waitSeconds":60}`, out)
	eventually(t, 30*time.Second, "the waiter queued", func() bool { return hr.waitRecords() == 1 })
	cancel()
	next(t, out, "the cancelled request")
	eventually(t, 30*time.Second, "the waiter left the queue", func() bool { return hr.waitRecords() == 0 })
	eventually(t, 30*time.Second, "the wait counted gone", func() bool { return hr.obs.count("wait/gone") == 1 })
	if !hr.release(first.ID) {
		t.Fatal("not released")
	}
	eventually(t, 30*time.Second, "the slot free", func() bool { return hr.slots() == 0 })
	hr.mustAcquire(events.AcquireRequest{TTLSeconds: 60})
	if n := hr.slots(); n != 1 {
		t.Errorf("%d slots held, want 1", n)
	}
}

// A waiting acquire is demand of the kind `waiting` while it waits, not a refusal each time it
// looks again; served, it answers no refusal; one that waits in vain counts one refusal.
func TestWaitingAcquiresInTheDemandRecords(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.DemandInterval = time.Second; c.DemandWindow = time.Minute })
	if _, err := r.store.Pools.Put(context.Background(), "web", []byte(`{"template":{"provider":"local","attributes":{"geo":"de"}},"replicas":1}`)); err != nil {
		t.Fatal(err)
	}
	r.seed(proxy{name: "web-aaaaa", pool: "web", attrs: map[string]string{"geo": "de", "pool": "web"}, maxLeases: 1})
	r.startLeasers(1)
	sel := map[string]string{"pool": "web"}
	first := r.mustAcquire(events.AcquireRequest{Selector: sel, TTLSeconds: 60})

	got := make(chan reply, 1)
	go func() {
		data, _ := json.Marshal(events.AcquireRequest{Selector: sel, WaitSeconds: 60})
		m, err := r.nc.Request(events.LeaseAcquireSubject, data, 70*time.Second)
		if err != nil {
			got <- reply{code: -1, header: err.Error()}
			return
		}
		got <- decodeReply(t, m)
	}()
	eventually(t, 30*time.Second, "the waiter counted waiting", func() bool { return r.demandOf("web").Waiting == 1 })
	// Proxies change (a health record) wake it several times: none of its looks is a refusal.
	r.seed(proxy{name: "web-aaaaa", pool: "web", attrs: map[string]string{"geo": "de", "pool": "web"}, maxLeases: 1, latencyMs: 3})
	if d := r.demandOf("web"); d.Refused != 0 {
		t.Fatalf("a waiting acquire counted refused: %+v", d)
	}
	r.release(first.ID)
	if rep := <-got; rep.code != 0 {
		t.Fatalf("the waiter: %d %s", rep.code, rep.err.Message)
	}
	eventually(t, 30*time.Second, "the waiter served", func() bool {
		d := r.demandOf("web")
		return d.Waiting == 0 && d.Granted == 2 && d.Refused == 0
	})

	// One that waits in vain is one refusal.
	if _, rep := r.acquire(events.AcquireRequest{Selector: sel, WaitSeconds: 1}); rep.code != events.CodeUnavailable {
		t.Fatalf("want 503 after the wait, got %d", rep.code)
	}
	eventually(t, 30*time.Second, "the wait in vain counted refused once", func() bool {
		d := r.demandOf("web")
		return d.Waiting == 0 && d.Refused == 1
	})
}
