package leaser_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
)

// Events only the replica that made them writes (grant, renewal, release, report) carry no
// Nats-Msg-Id, so the server keeps no ID per lease cycle for its duplicate window; an expiry,
// which every replica publishes, carries its ID, so the stream keeps one.
func TestLeaseEventsCarryAnIDOnlyWhenReplicasShareThem(t *testing.T) {
	r := newRig(t, rawAll)
	var mu sync.Mutex
	withID := map[string]bool{} // kind/reason → some copy carried a Nats-Msg-Id
	seen := map[string]bool{}
	sub, err := r.nc.Subscribe(events.EventsSubjects, func(m *nats.Msg) {
		var ev events.Event
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		k := string(ev.Kind) + "/" + string(ev.Reason)
		mu.Lock()
		defer mu.Unlock()
		seen[k] = true
		if m.Header.Get(nats.MsgIdHdr) == ev.ID {
			withID[k] = true
		} else if m.Header.Get(nats.MsgIdHdr) != "" {
			t.Errorf("%s: Nats-Msg-Id %q is not the event's ID %q", k, m.Header.Get(nats.MsgIdHdr), ev.ID)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.seed(proxy{name: "p1", maxLeases: 3})
	r.startLeasers(2)

	g := r.mustAcquire(events.AcquireRequest{Holder: "c1", TTLSeconds: 60})
	r.renew(g.ID, 30)
	r.report(events.ReportRequest{ID: g.ID, Result: events.ReportOK})
	r.release(g.ID)
	r.mustAcquire(events.AcquireRequest{Holder: "c2", TTLSeconds: 1})

	want := map[string]bool{"lease/granted": false, "lease/renewed": false, "lease/released": false, "report/ok": false, "lease/expired": true}
	eventually(t, 10*time.Second, "every event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := range want {
			if !seen[k] {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for k, id := range want {
		if withID[k] != id {
			t.Errorf("%s: carries a Nats-Msg-Id %v, want %v", k, withID[k], id)
		}
	}
}
