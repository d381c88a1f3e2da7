package leaser_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go"
)

// putPool writes a pool spec whose leases.maxPerHolder is limit.
func (r *rig) putPool(name string, limit int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := map[string]any{"template": map[string]any{"provider": "local"}, "replicas": 2, "leases": map[string]any{"maxPerHolder": limit}}
	if _, err := kvstore.PutJSON(ctx, r.store.Pools, name, spec); err != nil {
		r.t.Fatal(err)
	}
}

// A holder capped at 2 is refused its third lease with a 429 naming its limit, while another
// holder is served; a renewal keeps the count and a release makes room. A pool's
// leases.maxPerHolder overrides the default for its members, and a capped acquire must say
// who holds it.
func TestHolderCapRefusesTheThirdLease(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.MaxPerHolder = 2 })
	none, crawl := map[string]string{"kind": "none"}, map[string]string{"kind": "crawl"}
	r.seed(proxy{name: "px-a", maxLeases: 10, attrs: none}, proxy{name: "px-b", maxLeases: 10, attrs: none},
		proxy{name: "crawl-1", maxLeases: 10, pool: "crawl", attrs: crawl}, proxy{name: "crawl-2", maxLeases: 10, pool: "crawl", attrs: crawl})
	r.putPool("crawl", 1)
	r.startLeasers(2)
	req := func(holder string, sel map[string]string) events.AcquireRequest {
		return events.AcquireRequest{TTLSeconds: 60, Holder: holder, Selector: sel}
	}
	var held []events.LeaseGrant
	for range 2 {
		held = append(held, r.mustAcquire(req("crawler-7", none)))
	}
	_, rep := r.acquire(req("crawler-7", none))
	if rep.code != events.CodeTooMany || rep.err.Reason != events.ErrorHolderAtCap || rep.err.Limit != 2 ||
		!strings.Contains(rep.err.Message, `holder "crawler-7" holds 2 leases on the proxies in no pool`) ||
		!strings.Contains(rep.header, "maxPerHolder") {
		t.Fatalf("third lease: %d %q %+v", rep.code, rep.header, rep.err)
	}
	// The pool's own limit, 1.
	r.mustAcquire(req("crawler-7", crawl))
	_, rep = r.acquire(req("crawler-7", crawl))
	if rep.code != events.CodeTooMany || rep.err.Limit != 1 || !strings.Contains(rep.err.Message, "in pool crawl") {
		t.Fatalf("second lease in pool crawl: %d %+v", rep.code, rep.err)
	}
	// Capped everywhere: the refusal carries the numbers too.
	_, rep = r.acquire(req("crawler-7", nil))
	if rep.code != events.CodeTooMany || rep.err.Availability == nil || rep.err.Availability.Matched != 4 {
		t.Fatalf("any lease: %d %+v", rep.code, rep.err)
	}
	// Another holder is served; a capped acquire without a holder is a 400.
	r.mustAcquire(req("crawler-8", none))
	if _, rep := r.acquire(req("", none)); rep.code != events.CodeBadRequest || rep.err.Field != "holder" {
		t.Fatalf("no holder: %d %+v", rep.code, rep.err)
	}
	// A renewal keeps the count; a release frees one.
	if rep := r.call(events.LeaseRenewSubject, events.RenewRequest{ID: held[0].ID, TTLSeconds: 120}); rep.code != 0 {
		t.Fatalf("renew: %d %s", rep.code, rep.err.Message)
	}
	if _, rep := r.acquire(req("crawler-7", none)); rep.code != events.CodeTooMany {
		t.Fatalf("after a renewal: %d", rep.code)
	}
	r.release(held[1].ID)
	r.mustAcquire(req("crawler-7", none))
	// crawler-7: 2 in no pool and 1 in crawl; crawler-8: 1.
	if n := r.keys(r.store.LeaseState); n != 4 {
		t.Fatalf("%d holder slots, want 4", n)
	}
}

// A leaser killed between a holder slot and its proxy slot leaves a holder slot without a
// lease: it counts against the holder (below its limit, never above) until its TTL, the
// lease's plus a margin, and then the holder has its full limit again without anyone acting.
// Leases that expire free their holder slots the same way.
func TestHolderSlotOfACrashedAcquireFreesAtItsTTL(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) { c.MaxPerHolder = 1 })
	r.seed(proxy{name: "px-a", maxLeases: 10})
	r.startLeasers(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// What a crashed acquire of a 1 s lease leaves: the holder slot, nothing else.
	key := "holder._." + "Y3Jhd2xlcg" + ".0" // b64url("crawler")
	if _, err := kvstore.CreateTTL(ctx, r.store.LeaseState, key, []byte(`{"v":1,"holder":"crawler","token":"0123456789abcdef"}`), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, rep := r.acquire(events.AcquireRequest{TTLSeconds: 1, Holder: "crawler"}); rep.code != events.CodeTooMany {
		t.Fatalf("with the orphan holder slot: %d %+v", rep.code, rep.err)
	}
	eventually(t, 10*time.Second, "the orphan holder slot expires", func() bool {
		_, rep := r.acquire(events.AcquireRequest{TTLSeconds: 1, Holder: "crawler"})
		return rep.code == 0
	})
	// That lease expires unreleased; its holder slot follows it.
	eventually(t, 10*time.Second, "the expired lease's holder slot frees", func() bool {
		_, rep := r.acquire(events.AcquireRequest{TTLSeconds: 1, Holder: "crawler"})
		return rep.code == 0
	})
}

// The per-holder cap is exact however many replicas race: three leasers, 300 concurrent
// acquires by 10 holders capped at 3 over 20 proxies with room for 200 leases give each holder
// exactly 3 leases, and every other reply is a 429.
func TestHolderCapIsExactAcrossReplicas(t *testing.T) {
	const (
		holders  = 10
		limit    = 3
		requests = 300
		// Far longer than the burst (a few seconds under -race on a loaded machine), so no
		// lease expires within it; checked below rather than trusted.
		ttl = time.Minute
	)
	r := newRig(t, func(c *leaser.Config) { c.MaxPerHolder = limit })
	var ps []proxy
	for i := range 20 {
		ps = append(ps, proxy{name: fmt.Sprintf("px-%02d", i), maxLeases: 10})
	}
	r.seed(ps...)
	r.startLeasers(3)
	var conns []*nats.Conn
	for range 4 {
		nc, _ := kvstoretest.Connect(t, r.srv)
		conns = append(conns, nc)
	}
	start := time.Now()
	var mu sync.Mutex
	granted := map[string]int{}
	refused := 0
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			holder := fmt.Sprintf("crawler-%d", i%holders)
			body := fmt.Appendf(nil, `{"ttlSeconds":%d,"holder":%q}`, int(ttl/time.Second), holder)
			m, err := conns[i%len(conns)].Request(events.LeaseAcquireSubject, body, 30*time.Second)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			rep := decodeReply(t, m)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case rep.code == 0:
				granted[holder]++
			case rep.code == events.CodeTooMany && rep.err.Reason == events.ErrorHolderAtCap && rep.err.Limit == limit:
				refused++
			default:
				t.Errorf("request %d: %d %+v", i, rep.code, rep.err)
			}
		})
	}
	wg.Wait()
	if burst := time.Since(start); burst >= ttl {
		t.Fatalf("the burst took %v, longer than the TTL %v", burst, ttl)
	}
	for h := range holders {
		if n := granted[fmt.Sprintf("crawler-%d", h)]; n != limit {
			t.Errorf("crawler-%d holds %d leases, its limit is %d (all: %v)", h, n, limit, granted)
		}
	}
	if refused != requests-holders*limit {
		t.Errorf("%d refused, want %d", refused, requests-holders*limit)
	}
	if n := r.slots(); n != holders*limit {
		t.Errorf("%d lease slots held, want %d", n, holders*limit)
	}
	if n := r.keys(r.store.LeaseState); n != holders*limit {
		t.Errorf("%d holder slots held, want %d", n, holders*limit)
	}
}
