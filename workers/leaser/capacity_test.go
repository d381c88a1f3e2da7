package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Three replicas, 1,000 concurrent acquires, 10 Ready proxies with maxLeases 3: exactly 30
// leases, every other reply a 503 with the numbers, and all 30 slots free again after the TTL
// with no client action (DESIGN §3.5, issue 3).
func TestLeaseCapacityIsExactAcrossReplicas(t *testing.T) {
	const (
		proxies   = 10
		maxLeases = 3
		requests  = 1000
		// The minimum the service allows in this test. It must outlast the burst (about
		// 0.1 s, or 1–2 s under -race on two cores), or a slot could expire and be granted
		// twice within it; the test checks that rather than trust it.
		ttl = 5 * time.Second
	)
	r := newRig(t, func(c *leaser.Config) { c.MinTTL = ttl })
	var ps []proxy
	for i := range proxies {
		ps = append(ps, proxy{name: fmt.Sprintf("px-%02d", i), maxLeases: maxLeases})
	}
	r.seed(ps...)
	r.startLeasers(3)

	// Four client connections, so requests arrive interleaved as from many crawlers.
	var conns []*nats.Conn
	for range 4 {
		nc, _ := kvstoretest.Connect(t, r.srv)
		conns = append(conns, nc)
	}
	req, _ := json.Marshal(events.AcquireRequest{TTLSeconds: int(ttl / time.Second), Holder: "crawler"})
	replies := make([]reply, requests)
	grants := make([]events.LeaseGrant, requests)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			m, err := conns[i%len(conns)].Request(events.LeaseAcquireSubject, req, 30*time.Second)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			replies[i] = decodeReply(t, m)
			if replies[i].code == 0 {
				var lr events.LeaseReply
				if err := json.Unmarshal(m.Data, &lr); err != nil {
					t.Errorf("reply %d: %v", i, err)
				}
				grants[i] = lr.Lease
			}
		})
	}
	wg.Wait()
	burst := time.Since(start)
	if burst >= ttl {
		t.Fatalf("the burst took %v, longer than the TTL %v: leases may have expired and been granted again", burst, ttl)
	}

	granted, refused := 0, 0
	ids := map[string]bool{}
	perProxy := map[string]int{}
	want := events.Availability{Matched: proxies, Ready: proxies, AtCapacity: proxies}
	for i, rep := range replies {
		switch rep.code {
		case 0:
			granted++
			ids[grants[i].ID] = true
			perProxy[grants[i].Proxy]++
		case events.CodeUnavailable:
			refused++
			if rep.err.Availability == nil || *rep.err.Availability != want {
				t.Errorf("reply %d: availability %+v, want %+v", i, rep.err.Availability, want)
			}
		default:
			t.Errorf("reply %d: code %d %s", i, rep.code, rep.err.Message)
		}
	}
	t.Logf("%d acquires on 3 replicas in %v: %d granted, %d refused with 503", requests, burst, granted, refused)
	if granted != proxies*maxLeases || refused != requests-granted || len(ids) != granted {
		t.Fatalf("granted %d (%d distinct IDs), refused %d; want exactly %d granted", granted, len(ids), refused, proxies*maxLeases)
	}
	for name, n := range perProxy {
		if n != maxLeases {
			t.Errorf("%s has %d leases, want %d", name, n, maxLeases)
		}
	}
	counts, err := r.store.Leases.Held(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != proxies {
		t.Errorf("held slots by proxy = %v", counts)
	}

	// Nobody renews or releases: the server expires every slot.
	eventually(t, 2*ttl, "every slot expires", func() bool { return r.slots() == 0 })
	t.Logf("all %d slots were free again %v after the burst began (TTL %v)", granted, time.Since(start).Round(time.Millisecond), ttl)
	// Every slot can be leased again. A replica whose watch is a moment behind may still
	// refuse one, so refusals are retried; grants must reach exactly 30. These leases last
	// the rest of the test, however slow the machine: none may expire and free a slot (or add
	// an expiry event) before the checks below.
	again := 0
	eventually(t, 15*time.Second, "30 slots leased again", func() bool {
		if _, rep := r.acquire(events.AcquireRequest{TTLSeconds: 120}); rep.code == 0 {
			again++
		}
		return again == proxies*maxLeases
	})
	if _, rep := r.acquire(events.AcquireRequest{TTLSeconds: 120}); rep.code != events.CodeUnavailable {
		t.Fatalf("31st acquire after the expiry: code %d", rep.code)
	}

	// Each expiry is one event in the stream, though every replica published it.
	eventually(t, 5*time.Second, "30 expired events in EGRESS_LEASE_EVENTS", func() bool {
		return countStored(t, r, events.ReasonExpired) == granted
	})
}

// countStored counts the lease events with reason in EGRESS_LEASE_EVENTS (not the core NATS copies,
// which the stream's duplicate window does not thin out).
func countStored(t *testing.T, r *rig, reason events.Reason) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := r.store.JS.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject(events.KindLease, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := c.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var ev events.Event
		if json.Unmarshal(m.Data(), &ev) == nil && ev.Reason == reason {
			n++
		}
	}
	return n
}
