package leaser

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkViewCycle is the in-memory part of an acquire and release at fleet size, without
// NATS: 10,000 Ready proxies with a selector's set, each cycle reading a batch of candidates
// from the selection core, recording the grant in the view and its release. It isolates
// what the view and the core cost a lease (a few µs of the ~450 µs a cycle takes with the
// server, BenchmarkAcquireRelease), which the NATS benchmarks' noise hides.
func BenchmarkViewCycle(b *testing.B) {
	v := newView(0)
	seedView(v.applySpec, v.applyStatus, v.applyHealth)
	b.ResetTimer()
	rev := uint64(1 << 20)
	for i := 0; b.Loop(); i++ {
		q := selection.NewQuery(events.AcquireRequest{Selector: map[string]string{"geo": "de"}})
		var cur selection.Cursor
		cs := v.fleet.Next(q, &cur, map[string]bool{}, candidateBatch)
		c := cs[0]
		key := events.SlotKey(c.Name, c.Free[0])
		rev++
		v.noteLease(key, rev, events.Lease{Proxy: c.Name, Slot: c.Free[0], AcquiredAt: time.Unix(int64(i), 0)})
		v.noteReleased(key, rev)
	}
}

// seedView fills a view with 10,000 Ready proxies of geo de with 4 slots each, as the watches
// would deliver them.
func seedView(spec, status, health func(jetstream.KeyValueEntry)) {
	rev := uint64(0)
	put := func(apply func(jetstream.KeyValueEntry), key string, val any) {
		rev++
		bs, _ := json.Marshal(val)
		apply(entry{key: key, value: bs, op: jetstream.KeyValuePut, rev: rev})
	}
	for i := range 10000 {
		name := fmt.Sprintf("px-%05d", i)
		put(spec, name, map[string]any{"provider": "local", "maxLeases": 4, "attributes": map[string]string{"geo": "de"}})
		put(status, name, events.ProxyStatus{V: 1, Phase: events.PhaseReady, IP: "127.0.0.1", Port: 3128})
		put(health, name, events.ProxyHealth{V: 1, Address: "127.0.0.1:3128", LatencyMs: float64(i%7 + 1)})
	}
}
