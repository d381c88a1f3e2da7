package flowtest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	convergeN        = flag.Int("converge.n", 10000, "external proxies BenchmarkConvergeFleet puts")
	convergeInterval = flag.Duration("converge.interval", 30*time.Second, "probe interval of BenchmarkConvergeFleet's proxies")
)

// BenchmarkConvergeFleet puts N external proxies over the fleet of fleet_test.go (four real
// forward proxies, two real probers, one reconciler) and measures the time from the first put
// until every one is Ready, in seconds and in probe intervals (the goal: 1.5). Beside it, the
// same run measures a floor on the same server: putting the N specs serially, and writing N
// statuses serially with CAS twice each (create, then update), the two status writes an
// external proxy needs between put and Ready. It runs one fleet whatever b.N is, and gives up
// three intervals after the last put.
func BenchmarkConvergeFleet(b *testing.B) {
	n, iv := *convergeN, *convergeInterval
	h := newHarness(b)
	backends := h.fleet()
	casSerial := serialStatusCAS(b, h, n)

	h.reconciler("r1")
	// Let the reconciler take the lead, and the probers find the fleet, before the clock starts.
	h.put("warm", string(externalSpec(backends[0], iv)))
	h.waitPhase("warm", events.PhaseReady)
	w, err := h.store.Status.WatchAll(h.ctx, jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = kvstore.StopWatch(w) }()

	b.ResetTimer()
	start := time.Now()
	for i := range n {
		if _, err := h.store.Proxies.Put(h.ctx, fmt.Sprintf("ext-%05d", i), externalSpec(backends[i%len(backends)], iv)); err != nil {
			b.Fatal(err)
		}
	}
	seeded := time.Since(start)
	ready, seen := map[string]bool{}, map[string]bool{}
	var allRunning time.Duration
	giveUp := time.After(3*iv + seeded)
	for len(ready) < n {
		select {
		case e := <-w.Updates():
			var st events.ProxyStatus
			if e == nil || e.Key() == "warm" || e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &st) != nil {
				continue
			}
			seen[e.Key()] = true
			if len(seen) == n && allRunning == 0 {
				allRunning = time.Since(start)
			}
			if st.Phase == events.PhaseReady {
				ready[e.Key()] = true
			} else {
				delete(ready, e.Key())
			}
		case <-giveUp:
			b.Fatalf("%d of %d Ready (%d with a status) %v after the first put", len(ready), n, len(seen), time.Since(start).Round(time.Millisecond))
		}
	}
	converged := time.Since(start)
	b.StopTimer()
	floor := seeded + casSerial
	b.ReportMetric(converged.Seconds(), "s-to-ready")
	b.ReportMetric(converged.Seconds()/iv.Seconds(), "intervals-to-ready")
	b.ReportMetric(allRunning.Seconds(), "s-to-all-status")
	b.ReportMetric(seeded.Seconds(), "s-put")
	b.ReportMetric(casSerial.Seconds(), "s-serial-cas")
	b.ReportMetric(converged.Seconds()/floor.Seconds(), "ready/floor")
	b.Logf("n=%d interval=%v: all Ready %v after the first put (%.2f intervals), every status written after %v; floor %v (puts %v + %d serial CAS writes %v), ratio %.2f",
		n, iv, converged.Round(time.Millisecond), converged.Seconds()/iv.Seconds(), allRunning.Round(time.Millisecond),
		floor.Round(time.Millisecond), seeded.Round(time.Millisecond), 2*n, casSerial.Round(time.Millisecond), converged.Seconds()/floor.Seconds())
}

// serialStatusCAS writes n statuses one after another with CAS, each created and then updated
// at its revision, into a scratch bucket configured like proxy_status, and returns how long
// that took.
func serialStatusCAS(b *testing.B, h *harness, n int) time.Duration {
	b.Helper()
	kv, err := h.store.JS.CreateKeyValue(h.ctx, jetstream.KeyValueConfig{Bucket: "bench_status", History: 1})
	if err != nil {
		b.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseRunning, IP: "127.0.0.20", Port: 3128, UID: "bench"}
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("ext-%05d", i)
		rev, err := kvstore.WriteJSON(ctx, kv, key, st, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := kvstore.WriteJSON(ctx, kv, key, st, rev); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	if err := h.store.JS.DeleteKeyValue(h.ctx, "bench_status"); err != nil {
		b.Fatal(err)
	}
	return took
}
