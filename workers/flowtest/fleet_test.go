package flowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/workers/prober"
)

// serveUntilCleanup runs fn until the test ends. Its cleanup is registered after the
// connections fn uses were opened, so it stops before they close.
func (h *harness) serveUntilCleanup(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(h.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := fn(ctx); err != nil {
			h.t.Errorf("serve: %v", err)
		}
	})
	h.t.Cleanup(func() { cancel(); wg.Wait() })
}

// fleet starts four real forward proxies on 127.0.0.20–23, an echo server to check through
// them, and two real probers; it returns the forward proxies' addresses.
func (h *harness) fleet() []string {
	var backends []string
	for i := range 4 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", 20+i))
		if err != nil {
			h.t.Fatal(err)
		}
		backends = append(backends, ln.Addr().String())
		h.serveUntilCleanup(func(ctx context.Context) error { return forwardproxy.Serve(ctx, ln, forwardproxy.Config{}) })
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	h.serveUntilCleanup(func(ctx context.Context) error { return prober.ServeEcho(ctx, echo) })
	for i := range 2 {
		nc, store := h.connectNC()
		p, err := prober.New(prober.Config{Buckets: prober.BucketsOf(store), NC: nc, Worker: fmt.Sprintf("prober-%d", i),
			DefaultCheckURL: "http://" + echo.Addr().String() + "/", Log: h.log})
		if err != nil {
			h.t.Fatal(err)
		}
		h.serveUntilCleanup(p.Run)
	}
	return backends
}

// externalSpec is an external proxy on one of the fleet's forward proxies.
func externalSpec(backend string, interval time.Duration) []byte {
	host, port, _ := net.SplitHostPort(backend)
	return fmt.Appendf(nil, `{"mode":"external","endpoint":{"host":%q,"port":%s},"healthCheck":{"intervalSeconds":%d}}`,
		host, port, int(interval.Seconds()))
}

// 2,000 external proxies over four real forward proxies, a 10 s interval and two probers:
// every one becomes Ready, and afterwards every proxy is probed again and again (none is
// dropped), by both probers sharing the fleet, and no proxy's last probe is ever older than
// ageBound allows: two intervals, plus what the probers themselves report as their lag.
func TestFleetIsProbedEveryInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet-size test")
	}
	const (
		n = 2000
		// 10 s: each probe is two proxied requests (the CONNECT and the plain-HTTP path), so
		// this is 400 requests a second through four in-process proxies under -race, what
		// 5 s was with one path.
		interval = 10 * time.Second
		rounds   = 2 // re-probes every proxy must get after all are Ready
	)
	h := newHarness(t)
	backends := h.fleet()
	h.reconciler("r1")

	start := time.Now()
	for i := range n {
		if _, err := h.store.Proxies.Put(h.ctx, fmt.Sprintf("ext-%04d", i), externalSpec(backends[i%len(backends)], interval)); err != nil {
			t.Fatal(err)
		}
	}
	seeded := time.Since(start)

	ready := func() (int, string) {
		sts, err := kvstore.Latest(h.ctx, h.store.Status)
		if err != nil {
			t.Fatal(err)
		}
		k, other := 0, ""
		for name, e := range sts {
			var st events.ProxyStatus
			if json.Unmarshal(e.Value(), &st) == nil && st.Phase == events.PhaseReady {
				k++
			} else if other == "" {
				other = name + " " + string(st.Phase)
			}
		}
		return k, other
	}
	// Polled twice a second: a whole-bucket read of 2,000 statuses is load on what it measures.
	// The budget only bounds a stuck run: with both probe paths (two proxied requests per
	// probe) under -race on a shared 2-core machine, converging took up to 2 minutes.
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		k, other := ready()
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			hs, _ := kvstore.Latest(h.ctx, h.store.Health)
			t.Fatalf("%d of %d Ready four minutes after the first put (e.g. %s), %d health records", k, n, other, len(hs))
		}
	}
	t.Logf("%d proxies seeded in %v, all Ready %v after the first put", n, seeded.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Every proxy's probe time must move on `rounds` times: a dropped probe would leave a
	// proxy behind for good. Counted from the health records' LastProbeAt changes.
	last := map[string]time.Time{}
	seen := map[string]int{}
	probers := map[string]int{}
	oldest, lag := time.Duration(0), time.Duration(0)
	for deadline := time.Now().Add(20 * interval); ; time.Sleep(time.Second) {
		// now is taken before the reads, so a slow read cannot age a record it did not see.
		now, behind, example := time.Now(), 0, ""
		lag = max(lag, proberLag(t, h))
		hs, err := kvstore.Latest(h.ctx, h.store.Health)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			name := fmt.Sprintf("ext-%04d", i)
			e, ok := hs[name]
			if !ok {
				t.Fatalf("%s has no health record", name)
			}
			var rec events.ProxyHealth
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				t.Fatal(err)
			}
			age := now.Sub(rec.LastProbeAt)
			oldest = max(oldest, age)
			if bound := ageBound(interval, lag); age > bound {
				t.Fatalf("%s last probed %v ago, over the bound %v (two intervals of %v, the probers' reported lag %v, %v of slack)",
					name, age.Round(time.Millisecond), bound, interval, lag.Round(time.Millisecond), ageSlack)
			}
			if prev, ok := last[name]; ok && rec.LastProbeAt.After(prev) {
				seen[name]++
				probers[rec.Prober]++
			}
			last[name] = rec.LastProbeAt
			if seen[name] < rounds {
				behind++
				if example == "" {
					example = name
				}
			}
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d proxies probed fewer than %d times again in %v (e.g. %s, %d times)", behind, n, rounds, 20*interval, example, seen[example])
		}
	}
	if len(probers) != 2 {
		t.Errorf("probes by prober %v, want both probers sharing", probers)
	}
	if k, other := ready(); k != n {
		t.Errorf("%d of %d Ready after the re-probes (e.g. %s)", k, n, other)
	}
	t.Logf("oldest last probe seen %v (interval %v, bound %v with the probers' highest reported lag %v); re-probes by prober %v",
		oldest.Round(time.Millisecond), interval, ageBound(interval, lag), lag.Round(time.Millisecond), probers)
}

// ageSlack is what a probe's age may hold beyond its schedule and the probers' reported lag:
// the probe's own timeout (LastProbeAt is its start; the default timeout is 5 s), the second
// between the probers' lag samples and the 2 s between their membership renewals that carry
// them, and a second for the health record's write to land.
const ageSlack = 5*time.Second + 3*time.Second + time.Second

// ageBound is how old a proxy's last probe may be: a prober schedules the next probe between
// half an interval and one and a half after the last (schedule.go), and a share that moves
// between probers is picked up within one more; beyond that a probe is late only while a
// prober is behind, and a prober that is behind says by how much (ProberMember.LagSeconds,
// the oldest due probe waiting for a worker). So the bound holds on a loaded machine as on
// an idle one, while a proxy left out of the schedule ages past it with no lag reported.
func ageBound(interval, lag time.Duration) time.Duration { return 2*interval + lag + ageSlack }

// proberLag is the highest lag the live probers report in egress_probers now.
func proberLag(t *testing.T, h *harness) time.Duration {
	t.Helper()
	ms, err := kvstore.Latest(h.ctx, h.store.Probers)
	if err != nil {
		t.Fatal(err)
	}
	lag := time.Duration(0)
	for _, e := range ms {
		var m events.ProberMember
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			t.Fatal(err)
		}
		lag = max(lag, time.Duration(m.LagSeconds*float64(time.Second)))
	}
	return lag
}
