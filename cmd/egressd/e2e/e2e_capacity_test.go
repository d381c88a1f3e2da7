package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go"
)

// Three leaser processes, 1,000 concurrent acquires against 10 Ready proxies with maxLeases
// 3: exactly 30 granted, every other reply "no proxy available" with the right numbers, and
// after the TTL all 30 slots are free again with no client action.
func TestLeaseCapacityAcrossThreeLeaserProcesses(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, "--roles", "leaser")
	startRole(t, dir, n.url, "--roles", "leaser")
	startRole(t, dir, n.url, "--roles", "leaser")

	nc, js := n.client()
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var store *kvstore.Store
	waitUntil(t, "the buckets to be declared", 30*time.Second, func() (bool, string) {
		store, err = kvstore.Bind(ctx, js)
		return err == nil, fmt.Sprint(err)
	})
	// Ten Ready proxies, written as the reconciler would (no reconciler runs here).
	for i := range 10 {
		name := fmt.Sprintf("p%d", i)
		if _, err := store.Proxies.Put(ctx, name, []byte(`{"provider":"local","maxLeases":3}`)); err != nil {
			t.Fatal(err)
		}
		st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local",
			IP: fmt.Sprintf("127.0.26.%d", i+2), Port: 3128}
		if _, err := kvstore.PutJSON(ctx, store.Status, name, st); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "three leaser instances answering", 30*time.Second, func() (bool, string) {
		got := instances(t, nc, "$SRV.PING."+events.LeaseService)
		return len(got) == 3, fmt.Sprintf("%d instances", len(got))
	})
	// The replicas see the proxies through their watches; wait until one grants, then free it.
	waitUntil(t, "the proxies to be leasable", 30*time.Second, func() (bool, string) {
		m, err := nc.Request(events.LeaseAcquireSubject, []byte(`{"ttlSeconds":5}`), 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		var r events.LeaseReply
		if json.Unmarshal(m.Data, &r) == nil && r.Lease.ID != "" {
			_, _ = nc.Request(events.LeaseReleaseSubject, []byte(`{"id":"`+r.Lease.ID+`"}`), 5*time.Second)
			return true, ""
		}
		return false, string(m.Data)
	})
	time.Sleep(time.Second) // every replica's view has caught up with that release

	start := time.Now()
	granted := burst(t, nc, 1000)
	if took := time.Since(start); took >= burstTTL {
		// Slots could have expired and been granted again inside the burst.
		t.Fatalf("the burst took %s, longer than the lease TTL %s: the count would prove nothing", took, burstTTL)
	}
	if len(granted) != 30 {
		t.Fatalf("%d leases granted, want exactly 30", len(granted))
	}
	perProxy := map[string]int{}
	for _, g := range granted {
		perProxy[g.Proxy]++
	}
	for p, c := range perProxy {
		if c != 3 {
			t.Fatalf("%s holds %d leases, want 3 (%v)", p, c, perProxy)
		}
	}
	for _, stats := range instances(t, nc, "$SRV.STATS."+events.LeaseService) {
		var s struct {
			Endpoints []struct {
				Name        string `json:"name"`
				NumRequests int    `json:"num_requests"`
			} `json:"endpoints"`
		}
		_ = json.Unmarshal(stats, &s)
		served := 0
		for _, e := range s.Endpoints {
			if e.Name == "acquire" {
				served = e.NumRequests
			}
		}
		if served == 0 {
			t.Errorf("a leaser replica served no acquire: %s", stats)
		}
	}
	// No client action: the server expires every slot after the TTL.
	waitUntil(t, "every slot to expire", burstTTL+30*time.Second, func() (bool, string) {
		counts, err := store.Leases.Held(ctx)
		if err != nil {
			return false, err.Error()
		}
		k := 0
		for _, n := range counts {
			k += n
		}
		return k == 0, fmt.Sprintf("%d slots held", k)
	})
	time.Sleep(time.Second)
	if again := burst(t, nc, 100); len(again) != 30 {
		t.Fatalf("after expiry %d leases granted, want 30", len(again))
	}
}

// burstTTL is long enough that no slot expires during a burst, even on a loaded machine.
const burstTTL = 15 * time.Second

// burst sends n concurrent acquires and returns the grants; every refusal must be a 503
// whose numbers say the fleet is at capacity.
func burst(t *testing.T, nc *nats.Conn, n int) []events.LeaseGrant {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var granted []events.LeaseGrant
	var refusals []string
	for range n {
		wg.Go(func() {
			m, err := nc.Request(events.LeaseAcquireSubject, []byte(fmt.Sprintf(`{"ttlSeconds":%d,"holder":"burst"}`, int(burstTTL.Seconds()))), 20*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, "transport: "+err.Error())
				return
			}
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
				var e events.ErrorReply
				_ = json.Unmarshal(m.Data, &e)
				a := e.Error.Availability
				if code != "503" || a == nil || a.Matched != 10 || a.Ready != 10 || a.AtCapacity != 10 {
					refusals = append(refusals, code+" "+string(m.Data))
				}
				return
			}
			var r events.LeaseReply
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
				refusals = append(refusals, "reply: "+string(m.Data))
				return
			}
			granted = append(granted, r.Lease)
		})
	}
	wg.Wait()
	if len(refusals) > 0 {
		t.Fatalf("%d unexpected replies, first: %s", len(refusals), refusals[0])
	}
	return granted
}

// instances collects every reply to a $SRV discovery request for a moment.
func instances(t *testing.T, nc *nats.Conn, subject string) [][]byte {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		m, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			return out
		}
		out = append(out, m.Data)
	}
}
