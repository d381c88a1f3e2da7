package flowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkConverge measures the whole control path per proxy — KV put, decide, status CAS,
// op publish, pull, op lock, provider call, result event, fold — with a provider that
// answers at once. Compare it with BenchmarkBaselineKVPutGet from the same run.
func BenchmarkConverge(b *testing.B) {
	h := newHarness(b)
	fake := providertest.NewFake("fake", fakeHost(8))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	w, err := h.store.Status.WatchAll(h.ctx, jetstream.UpdatesOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = kvstore.StopWatch(w) }()
	// Let the reconciler take the lead before the clock starts.
	h.put("warm", `{"provider":"fake"}`)
	h.waitPhase("warm", events.PhaseRunning)
	b.ResetTimer()
	for i := range b.N {
		h.put(fmt.Sprintf("p%d", i), `{"provider":"fake"}`)
	}
	running := map[string]bool{}
	for len(running) < b.N {
		e := <-w.Updates()
		var st events.ProxyStatus
		if e != nil && json.Unmarshal(e.Value(), &st) == nil && st.Phase == events.PhaseRunning && e.Key() != "warm" {
			running[e.Key()] = true
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/proxy")
}

// BenchmarkBaselineKVPutGet is one KV put and one get on the same embedded server: the floor
// any KV-driven control loop stands on.
func BenchmarkBaselineKVPutGet(b *testing.B) {
	h := newHarness(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		k := fmt.Sprintf("k%d", i%1000)
		if _, err := h.store.Status.Put(ctx, k, []byte(`{"v":1}`)); err != nil {
			b.Fatal(err)
		}
		if _, err := h.store.Status.Get(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}
