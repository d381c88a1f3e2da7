// Package fleettest writes fleets into real buckets for the tests and benchmarks of every
// reader of the read model (readside/fleet): the same KV state for status, the status page
// and the metrics.
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// Put writes v (JSON, or raw bytes) under key.
func Put(tb testing.TB, kv jetstream.KeyValue, key string, v any) {
	tb.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, key, b); err != nil {
		tb.Fatalf("put %s/%s: %v", kv.Bucket(), key, err)
	}
}

// Want is what the readers must agree on for Mixed.
type Want struct {
	Phases       map[events.Phase]int
	Healthy      int
	Unhealthy    int
	ProbeOverdue int
	Leases       int            // every held slot
	RowLeases    map[string]int // per proxy
	// Anonymity counts the proxies with an address by verdict, "" unknown.
	Anonymity map[events.Anonymity]int
}

// Mixed writes a small fleet as of now: every phase the probers care about, verdicts at the
// current address, at an old one and stale, overdue probes, leases (one of a deleted proxy),
// and proxies without a status or without a spec. It returns what a reader must count.
func Mixed(tb testing.TB, st *kvstore.Store, now time.Time) Want {
	tb.Helper()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	type proxy struct {
		spec   string // empty: no spec
		status *events.ProxyStatus
		health *events.ProxyHealth
	}
	running := func(phase events.Phase, ip string, addressAt time.Time, reason events.Reason) *events.ProxyStatus {
		return &events.ProxyStatus{V: 1, Phase: phase, Mode: schemas.ModeManaged, Provider: "local", Host: "local", IP: ip, Port: 3128,
			Reason: reason, AddressAt: addressAt, CreatedAt: ago(time.Hour), UpdatedAt: ago(time.Second)}
	}
	verdict := func(addr string, healthy bool, probed time.Time) *events.ProxyHealth {
		h := &events.ProxyHealth{V: 1, Address: addr, Healthy: healthy, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: probed}
		if healthy {
			h.ConsecutiveSuccesses = 5
		} else {
			h.ConsecutiveFailures, h.LastError = 3, "connection refused"
		}
		return h
	}
	// judged is a verdict that also says what the proxy reveals.
	judged := func(h *events.ProxyHealth, a events.Anonymity, leaked ...string) *events.ProxyHealth {
		h.Anonymity, h.LeakedHeaders, h.EgressIP = a, leaked, "127.0.0.1"
		return h
	}
	proxies := map[string]proxy{
		"ready-de": {`{"provider":"local","maxLeases":2,"attributes":{"geo":"de"},"auth":{"username":"u","password":"SENTINEL-PASSWORD-77aa"}}`,
			running(events.PhaseReady, "127.0.0.2", ago(time.Hour), ""), judged(verdict("127.0.0.2:3128", true, ago(5*time.Second)), events.AnonymityElite)},
		"ready-fr": {`{"provider":"local","attributes":{"geo":"fr"}}`,
			func() *events.ProxyStatus {
				st := running(events.PhaseReady, "127.0.0.3", ago(time.Hour), events.ReasonEgressMismatch)
				st.Message = "traffic leaves from 127.0.0.1, expected 192.0.2.3"
				return st
			}(), func() *events.ProxyHealth {
				// Its traffic leaves from another address than the one expected.
				h := judged(verdict("127.0.0.3:3128", true, ago(10*time.Second)), events.AnonymityAnonymous, "Via")
				h.ExpectedEgress = "192.0.2.3"
				return h
			}()},
		// Its last probe is five minutes old: stale, so no verdict, and overdue.
		"ready-stale": {`{"provider":"local","attributes":{"geo":"de"}}`,
			running(events.PhaseReady, "127.0.0.4", ago(time.Hour), ""), verdict("127.0.0.4:3128", true, ago(5*time.Minute))},
		"sick": {`{"provider":"local"}`,
			running(events.PhaseUnhealthy, "127.0.0.5", ago(time.Hour), events.ReasonProbeFailing),
			judged(verdict("127.0.0.5:3128", false, ago(3*time.Second)), events.AnonymityTransparent, "Via", "X-Forwarded-For")},
		// A healthy verdict, but about the address it had before: unknown, and overdue since
		// its new address appeared two minutes ago.
		"moved": {`{"provider":"local"}`,
			running(events.PhaseRunning, "127.0.0.6", ago(2*time.Minute), ""), judged(verdict("127.0.0.99:3128", true, ago(time.Second)), events.AnonymityElite)},
		// New: no probe yet, within the bound. (Every bound leaves a minute or more of slack,
		// so a slow test run does not change a verdict.)
		"new": {`{"provider":"local"}`,
			running(events.PhaseRunning, "127.0.0.7", ago(10*time.Second), ""), nil},
		// A longer interval: a two-minute-old probe is current.
		"slow": {`{"provider":"local","healthCheck":{"intervalSeconds":120,"timeoutSeconds":5}}`,
			running(events.PhaseReady, "127.0.0.8", ago(time.Hour), ""), verdict("127.0.0.8:3128", true, ago(2*time.Minute))},
		"office": {`{"mode":"external","endpoint":{"host":"127.0.0.50","port":8080},"maxLeases":3}`,
			&events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: schemas.ModeExternal, IP: "127.0.0.50", Port: 8080, Reason: events.ReasonExternalEndpoint,
				AddressAt: ago(time.Hour), CreatedAt: ago(time.Hour), UpdatedAt: ago(time.Minute)},
			// Judged elite, but three minutes ago: as stale as its health, so unknown.
			judged(verdict("127.0.0.50:8080", true, ago(3*time.Minute)), events.AnonymityElite)},
		"pending": {`{"provider":"local"}`, nil, nil},
		"bad":     {`{"provider":"local","port":0.5}`, &events.ProxyStatus{V: 1, Phase: events.PhaseInvalid, Reason: events.ReasonInvalidSpec, Message: "port: must be an integer"}, nil},
		"broken": {`{"provider":"local"}`, &events.ProxyStatus{V: 1, Phase: events.PhaseFailed, Mode: schemas.ModeManaged, Provider: "local",
			Reason: events.ReasonPermanent, Message: "create failed"}, nil},
		// Being replaced: an address, but its teardown is under way, so not overdue.
		"swap": {`{"provider":"local","port":8080}`, &events.ProxyStatus{V: 1, Phase: events.PhaseReplacing, Mode: schemas.ModeManaged, Provider: "local",
			IP: "127.0.0.9", Port: 3128, Teardown: events.ReasonSpecChanged, Reason: events.ReasonSpecChanged, AddressAt: ago(time.Hour)}, nil},
		// Deleted: no spec any more.
		"gone": {"", &events.ProxyStatus{V: 1, Phase: events.PhaseDeleting, Mode: schemas.ModeManaged, Provider: "local", Reason: events.ReasonProxyDeleted}, nil},
	}
	for name, p := range proxies {
		if p.spec != "" {
			Put(tb, st.Proxies, name, []byte(p.spec))
		}
		if p.status != nil {
			Put(tb, st.Status, name, p.status)
		}
		if p.health != nil {
			p.health.Proxy = name
			Put(tb, st.Health, name, p.health)
		}
	}
	leases := []string{"ready-de.0", "ready-de.1", "office.0", "gone.0", "deleted-long-ago.0"}
	for _, key := range leases {
		Put(tb, st.Leases.ForKey(key), key, events.Lease{V: 1, Proxy: key[:len(key)-2], Holder: "crawler-7", ExpiresAt: now.Add(time.Minute)})
	}
	return Want{
		Phases: map[events.Phase]int{events.PhaseReady: 5, events.PhaseRunning: 2, events.PhaseUnhealthy: 1, events.PhasePending: 1,
			events.PhaseInvalid: 1, events.PhaseFailed: 1, events.PhaseReplacing: 1, events.PhaseDeleting: 1},
		Healthy: 3, Unhealthy: 1, ProbeOverdue: 3, Leases: 5,
		RowLeases: map[string]int{"ready-de": 2, "office": 1, "gone": 1},
		// moved's elite verdict is about its old address, office's stale: both unknown.
		Anonymity: map[events.Anonymity]int{events.AnonymityElite: 1, events.AnonymityAnonymous: 1, events.AnonymityTransparent: 1, "": 6},
	}
}

// Large writes n proxies as a busy fleet would hold them: a spec, a status and a health
// record each (every tenth Unhealthy; probes spread over the last 90 s, so some are
// overdue), and a lease on every third. Writes go four at a time, as a seed need not wait
// on each acknowledgement in turn.
func Large(tb testing.TB, st *kvstore.Store, n int, now time.Time) {
	tb.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		name := fmt.Sprintf("p-%05d", i)
		ip := fmt.Sprintf("127.%d.%d.%d", 1+i>>16, (i>>8)&0xff, i&0xff)
		addr := ip + ":3128"
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			Put(tb, st.Proxies, name, []byte(`{"provider":"local","maxLeases":2,"attributes":{"geo":"g`+strconv.Itoa(i%7)+`","tier":"general"}}`))
			phase, failures := events.PhaseReady, 0
			if i%10 == 0 {
				phase, failures = events.PhaseUnhealthy, 3
			}
			Put(tb, st.Status, name, events.ProxyStatus{V: 1, Phase: phase, Mode: schemas.ModeManaged, Provider: "local", Host: "local",
				UID: name + "-uid", InstanceName: "egressd-" + name, InstanceID: "id-" + name, IP: ip, Port: 3128, SpecHash: "h",
				AddressAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour), ReadyAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Minute)})
			Put(tb, st.Health, name, events.ProxyHealth{V: 1, Proxy: name, Address: addr, Healthy: failures == 0, ConsecutiveFailures: failures,
				SuccessThreshold: 1, FailureThreshold: 3, LatencyMs: 3.2, CheckURL: "http://127.0.0.1:1/echo", Prober: "prober-1",
				LastProbeAt: now.Add(-time.Duration(i%90) * time.Second)})
			if i%3 == 0 {
				Put(tb, st.Leases.Of(name), name+".0", events.Lease{V: 1, Proxy: name, Holder: "crawler", ExpiresAt: now.Add(time.Hour)})
			}
		})
	}
	wg.Wait()
}

// SentinelPoolSecret is planted in the pools' templates (auth and user-data) by Pools: no
// reader may show it.
const SentinelPoolSecret = "SENTINEL-POOL-SECRET-3e1d"

// PoolWant is what the readers must show for Pools: per pool, "phase desired members ready
// leased draining oldest" (desired "?" when unknown).
type PoolWant map[string]string

// Pools writes, as of now, what the pool controller and the reconciler would hold for four
// pools: "crawl" rotating (one member draining for its successor, leases on two members),
// "web" declared but not acted on yet (Pending), "broken" whose spec does not parse
// (Invalid), and "old" deleted, its last member's spec gone and its status Deleting. Their
// members are the only proxies it writes; call it on a store of its own or beside Mixed.
func Pools(tb testing.TB, st *kvstore.Store, now time.Time) PoolWant {
	tb.Helper()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	template := `{"provider":"local","maxLeases":2,"attributes":{"tier":"crawl"},"cloudInit":"#cloud-config\nruncmd: [echo ` +
		SentinelPoolSecret + `]","auth":{"username":"u","password":"` + SentinelPoolSecret + `"}}`
	Put(tb, st.Pools, "crawl", []byte(`{"replicas":3,"rotation":{"maxAgeSeconds":21600},"template":`+template+`}`))
	Put(tb, st.Pools, "web", []byte(`{"replicas":2,"template":`+template+`}`))
	Put(tb, st.Pools, "broken", []byte(`{"template":`+template+`}`)) // no replicas
	Put(tb, st.PoolStatus, "crawl", events.PoolStatus{V: 1, Phase: events.PoolProgressing, Reason: events.ReasonMaxAge,
		Message: "3 of 3 members Ready, 1 draining", SpecRevision: 1, Replicas: 3, MaxMembers: 4,
		Members: []events.PoolMember{
			{Name: "crawl-aaaaa", CreatedAt: ago(5 * time.Hour), RotateAt: ago(time.Minute), Retire: events.ReasonMaxAge,
				Successor: "crawl-ddddd", DrainingSince: ago(time.Minute)},
			{Name: "crawl-bbbbb", CreatedAt: ago(3 * time.Hour), RotateAt: now.Add(150 * time.Minute)},
			{Name: "crawl-ccccc", CreatedAt: ago(2 * time.Hour), RotateAt: now.Add(3 * time.Hour)},
			{Name: "crawl-ddddd", CreatedAt: ago(2 * time.Minute), RotateAt: now.Add(5 * time.Hour)},
		},
		NextRotation: now.Add(150 * time.Minute), UpdatedAt: ago(time.Minute)})
	Put(tb, st.PoolStatus, "old", events.PoolStatus{V: 1, Phase: events.PoolDeleting, Reason: events.ReasonPoolDeleted,
		Message: "deleting 1 member", Members: []events.PoolMember{{Name: "old-eeeee", CreatedAt: ago(48 * time.Hour),
			Retire: events.ReasonPoolDeleted, Deleting: true}}, UpdatedAt: ago(time.Second)})

	member := func(name, pool string, drain bool, phase events.Phase, ip string, created time.Time) {
		spec := fmt.Sprintf(`{"provider":"local","maxLeases":2,"attributes":{"tier":"crawl","pool":%q},"pool":%q,"drain":%t}`, pool, pool, drain)
		Put(tb, st.Proxies, name, []byte(spec))
		Put(tb, st.Status, name, events.ProxyStatus{V: 1, Phase: phase, Mode: schemas.ModeManaged, Provider: "local", Host: "local",
			IP: ip, Port: 3128, AddressAt: created, CreatedAt: created, UpdatedAt: ago(time.Second)})
		Put(tb, st.Health, name, events.ProxyHealth{V: 1, Proxy: name, Address: ip + ":3128", Healthy: true, ConsecutiveSuccesses: 3,
			SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: ago(2 * time.Second)})
	}
	member("crawl-aaaaa", "crawl", true, events.PhaseDraining, "127.0.1.1", ago(5*time.Hour))
	member("crawl-bbbbb", "crawl", false, events.PhaseReady, "127.0.1.2", ago(3*time.Hour))
	member("crawl-ccccc", "crawl", false, events.PhaseReady, "127.0.1.3", ago(2*time.Hour))
	member("crawl-ddddd", "crawl", false, events.PhaseReady, "127.0.1.4", ago(2*time.Minute))
	// Its spec is deleted: only the ledger says whose it is.
	Put(tb, st.Status, "old-eeeee", events.ProxyStatus{V: 1, Phase: events.PhaseDeleting, Mode: schemas.ModeManaged, Provider: "local",
		Reason: events.ReasonProxyDeleted, CreatedAt: ago(48 * time.Hour)})
	for _, key := range []string{"crawl-aaaaa.0", "crawl-aaaaa.1", "crawl-bbbbb.0"} {
		Put(tb, st.Leases.ForKey(key), key, events.Lease{V: 1, Proxy: key[:len(key)-2], Holder: "crawler-7", ExpiresAt: now.Add(time.Minute)})
	}
	return PoolWant{
		"broken": "Invalid ? 0 0 0 0 -",
		"crawl":  "Progressing 3 4 3 3 1 5h",
		"old":    "Deleting - 1 0 0 0 2d",
		"web":    "Pending 2 0 0 0 0 -",
	}
}
