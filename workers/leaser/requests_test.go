package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
)

// requestHost is where the HTTP faces of these tests listen.
const requestHost = "127.0.53.1"

// grantOf decodes a successful HTTP answer, or fails the test.
func grantOf(t *testing.T, rep reply, what string) events.LeaseGrant {
	t.Helper()
	if rep.code != 0 {
		t.Fatalf("%s: %d %s", what, rep.code, rep.err.Message)
	}
	var lr events.LeaseReply
	if err := json.Unmarshal(rep.body, &lr); err != nil {
		t.Fatal(err)
	}
	return lr.Lease
}

// Issue 31 item 2: an acquire sent again with its requestId, to any replica, over HTTP or
// NATS, is answered with the lease of its first try and grants nothing more. The ID is the
// holder's own (another crawler's equal ID is another request), and once the lease ended
// (released) the ID acquires afresh.
func TestRetriedAcquireGetsTheSameLeaseAcrossReplicas(t *testing.T) {
	hr := newHTTPRigAt(t, nil, requestHost)
	hr.seed(proxy{name: "px-a", maxLeases: 2}, proxy{name: "px-b", maxLeases: 2})
	hr.startLeasers(2)
	body := []byte(`{"requestId":"req-1","ttlSeconds":60}`)
	auth := "Bearer " + httpToken
	rep, _ := hr.post(http.DefaultClient, "http", 0, "acquire", auth, body)
	first := grantOf(t, rep, "first try")
	for i, to := range []int{1, 0, 1} {
		rep, _ := hr.post(http.DefaultClient, "http", to, "acquire", auth, body)
		if g := grantOf(t, rep, fmt.Sprintf("retry %d", i)); g.ID != first.ID || g.Host != first.Host || g.Port != first.Port {
			t.Fatalf("retry %d on replica %d: lease %s, the first try got %s", i, to, g.ID, first.ID)
		}
	}
	// Over NATS, with the holder the bearer token gave: the same request.
	if g := hr.mustAcquire(events.AcquireRequest{Holder: "crawler-a", RequestID: "req-1", TTLSeconds: 60}); g.ID != first.ID {
		t.Fatalf("retry over NATS: lease %s, want %s", g.ID, first.ID)
	}
	// Over HTTP the header Idempotency-Key says the same; with a requestId that differs it
	// is refused.
	if g := grantOf(t, hr.postKeyed(1, "req-1", `{"ttlSeconds":60}`), "Idempotency-Key"); g.ID != first.ID {
		t.Fatalf("retry with Idempotency-Key: lease %s, want %s", g.ID, first.ID)
	}
	if rep := hr.postKeyed(0, "req-2", string(body)); rep.code != events.CodeBadRequest || rep.err.Field != "requestId" {
		t.Fatalf("Idempotency-Key and requestId differing: %d %+v", rep.code, rep.err)
	}
	if n := hr.slots(); n != 1 {
		t.Fatalf("%d slots held after five tries of one acquire, want 1", n)
	}
	// Another crawler's request with an equal ID is its own.
	rep, _ = hr.post(http.DefaultClient, "http", 1, "acquire", "Bearer another-token-of-crawler-b-0000000000", body)
	if g := grantOf(t, rep, "crawler-b"); g.ID == first.ID {
		t.Fatal("crawler-b was answered with crawler-a's lease")
	}
	// Released, the lease no longer answers its request: the ID acquires afresh.
	rep, _ = hr.post(http.DefaultClient, "http", 1, "release", auth, []byte(`{"id":"`+first.ID+`"}`))
	if rep.code != 0 {
		t.Fatalf("release: %d %s", rep.code, rep.err.Message)
	}
	rep, _ = hr.post(http.DefaultClient, "http", 0, "acquire", auth, body)
	again := grantOf(t, rep, "after release")
	rep, _ = hr.post(http.DefaultClient, "http", 1, "acquire", auth, body)
	if g := grantOf(t, rep, "retry after release"); again.ID == first.ID || g.ID != again.ID {
		t.Fatalf("after release: %s then %s, the released one was %s", again.ID, g.ID, first.ID)
	}
	if n := hr.slots(); n != 2 {
		t.Fatalf("%d slots held, want 2 (crawler-b's and the new grant)", n)
	}
}

// Tries of one acquire that race each other on three replicas (a retry sent while the first
// is still being granted) all get one lease, and only it stays held.
func TestConcurrentTriesOfOneAcquireHoldOneLease(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 3}, proxy{name: "px-b", maxLeases: 3}, proxy{name: "px-c", maxLeases: 3})
	r.startLeasers(3)
	const rounds, tries = 4, 8
	for round := range rounds {
		req, _ := json.Marshal(events.AcquireRequest{Holder: "c1", RequestID: fmt.Sprintf("race-%d", round), TTLSeconds: 60})
		ids := make([]string, tries)
		var wg sync.WaitGroup
		for i := range tries {
			wg.Go(func() {
				m, err := r.nc.Request(events.LeaseAcquireSubject, req, 10*time.Second)
				if err != nil {
					t.Errorf("try %d: %v", i, err)
					return
				}
				rep := decodeReply(t, m)
				var lr events.LeaseReply
				if rep.code != 0 || json.Unmarshal(rep.body, &lr) != nil {
					t.Errorf("try %d: %d %s", i, rep.code, rep.err.Message)
				}
				ids[i] = lr.Lease.ID
			})
		}
		wg.Wait()
		for i, id := range ids {
			if id != ids[0] {
				t.Fatalf("round %d: try %d got %s, try 0 %s", round, i, id, ids[0])
			}
		}
		eventually(t, 10*time.Second, fmt.Sprintf("one slot per request after round %d", round), func() bool {
			return r.slots() == round+1
		})
	}
}

// A waiting acquire sent again (its caller timed out, or its HTTP connection broke) takes
// over the first try's place in the queue instead of queueing twice; the first try stops
// waiting, and one lease is granted for both when a slot frees.
func TestRetriedWaitingAcquireQueuesOnce(t *testing.T) {
	hr := newHTTPRigAt(t, nil, requestHost)
	hr.seed(proxy{name: "px-a", maxLeases: 1})
	hr.startLeasers(2)
	held := hr.mustAcquire(events.AcquireRequest{Holder: "other", TTLSeconds: 60})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan numbered, 2)
	body := `{"requestId":"wait-1","waitSeconds":60,"ttlSeconds":60}`
	hr.postAsync(ctx, 0, body, out)
	eventually(t, 10*time.Second, "the first try queued", func() bool { return hr.waitRecords() == 1 })
	hr.postAsync(ctx, 1, body, out)
	first := next(t, out, "the first try, taken over")
	if first.i != 0 || first.rep.code != events.CodeUnavailable || !strings.Contains(first.rep.err.Message, "took its place") {
		t.Fatalf("answer %d: %d %s", first.i, first.rep.code, first.rep.err.Message)
	}
	if n := hr.waitRecords(); n != 1 {
		t.Fatalf("%d waiting records for one acquire tried twice, want 1", n)
	}
	hr.release(held.ID)
	second := next(t, out, "the retry")
	if second.rep.code != 0 || second.grant.Proxy != "px-a" {
		t.Fatalf("retry: %d %s", second.rep.code, second.rep.err.Message)
	}
	// The retry asked again finds its lease.
	if g := hr.mustAcquire(events.AcquireRequest{Holder: "crawler-a", RequestID: "wait-1"}); g.ID != second.grant.ID {
		t.Fatalf("asked again: %s, granted %s", g.ID, second.grant.ID)
	}
	eventually(t, 10*time.Second, "no waiting record left", func() bool { return hr.waitRecords() == 0 })
	if n := hr.slots(); n != 1 {
		t.Fatalf("%d slots held, want 1", n)
	}
}

// A try that granted and died before recording its request (kill -9 between the slot's
// Create and the record's) leaves a held slot whose lease carries the request ID: a retry
// is answered with that lease, not a second one.
func TestRetryFindsAnUnrecordedGrant(t *testing.T) {
	r := newRig(t, nil)
	// One slot: a replica whose view has not heard of it yet finds it taken (503) and
	// grants nothing else.
	r.seed(proxy{name: "px-a", maxLeases: 1})
	r.startLeasers(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	orphan := events.Lease{V: 1, Proxy: "px-a", Slot: 0, Token: "0123456789abcdef", TTLSeconds: 60, Holder: "c1",
		AcquiredAt: now, ExpiresAt: now.Add(time.Minute), RequestID: "died-1"}
	b, _ := json.Marshal(orphan)
	if _, err := kvstore.CreateTTL(ctx, r.store.Leases.Of("px-a"), events.SlotKey("px-a", 0), b, time.Minute); err != nil {
		t.Fatal(err)
	}
	want := "px-a.0.0123456789abcdef"
	eventually(t, 10*time.Second, "both replicas answer with the unrecorded lease", func() bool {
		for range 4 {
			g, rep := r.acquire(events.AcquireRequest{Holder: "c1", RequestID: "died-1", TTLSeconds: 60})
			if rep.code != 0 || g.ID != want {
				return false
			}
		}
		return true
	})
	if n := r.slots(); n != 1 {
		t.Fatalf("%d slots held, want the one unrecorded lease", n)
	}
}

// postKeyed sends an acquire with an Idempotency-Key header to replica i's HTTP face.
func (hr *httpRig) postKeyed(i int, key, body string) reply {
	hr.t.Helper()
	hr.mu.Lock()
	addr := hr.addrs[i%len(hr.addrs)]
	hr.mu.Unlock()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+leaser.HTTPPathPrefix+"acquire", strings.NewReader(body))
	if err != nil {
		hr.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+httpToken)
	req.Header.Set(events.IdempotencyKeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		hr.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	rep := reply{body: b}
	if resp.StatusCode != http.StatusOK {
		rep.code = events.ErrorCode(resp.StatusCode)
		var er events.ErrorReply
		_ = json.Unmarshal(b, &er)
		rep.err = er.Error
	}
	return rep
}

// A retry that reaches a replica whose view knows no lease of its request ID takes the first
// try's way (no read of the request record before the grant), and still gets the lease its
// earlier try holds: when a slot is free, its grant's record Create finds the earlier record
// and gives the new slot back; when none is, the refusal reads the record. The earlier
// lease's slot is rewritten without its request ID and a new replica starts, so that the view
// cannot know it.
func TestAFirstTryThatIsARetryGetsTheEarlierLease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxLeases int
	}{
		{"a slot free: the record's Create decides", 2},
		{"no slot free: the refusal reads the record", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.seed(proxy{name: "p1", maxLeases: tc.maxLeases})
			r.startLeasers(1)
			req := events.AcquireRequest{Holder: "c1", RequestID: "req-9", TTLSeconds: 600}
			first := r.mustAcquire(req)
			r.kill(0)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			parts := strings.SplitN(first.ID, ".", 3)
			key := parts[0] + "." + parts[1]
			kv := r.store.Leases.Of(parts[0])
			e, err := kv.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(e.Value(), &rec); err != nil || rec["requestId"] != "req-9" {
				t.Fatalf("slot %s: %s (%v), want a lease with the request ID", key, e.Value(), err)
			}
			delete(rec, "requestId")
			b, _ := json.Marshal(rec)
			if _, err := kv.Update(ctx, key, b, e.Revision()); err != nil {
				t.Fatal(err)
			}

			r.startLeasers(1)
			g, rep := r.acquire(req)
			if rep.code != 0 || g.ID != first.ID {
				t.Fatalf("the retry on a replica that never heard of the request: %d %s, lease %q; want the earlier %s", rep.code, rep.err.Message, g.ID, first.ID)
			}
			if n := r.slots(); n != 1 {
				t.Errorf("%d slots held after the retry, want 1: a try's grant was not given back", n)
			}
		})
	}
}
