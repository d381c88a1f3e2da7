package leaser

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go/jetstream"
)

// The view is the seam between the watches and the selection core: it turns each entry into
// the core's update and drops one older than what it applied for the key, so a watch's late
// echo never undoes this replica's newer write. (What the core then does with the updates is
// its own specification, selection's property test.)
func TestViewFeedsTheFleetInRevisionOrder(t *testing.T) {
	v := newView(0)
	put := func(key string, rev uint64, val any) entry {
		b, _ := json.Marshal(val)
		return entry{key: key, value: b, op: jetstream.KeyValuePut, rev: rev}
	}
	v.applySpec(put("px-1", 1, map[string]any{"provider": "local", "maxLeases": 2, "attributes": map[string]string{"geo": "de"}}))
	v.applyStatus(put("px-1", 2, events.ProxyStatus{V: 1, Phase: events.PhaseReady, IP: "127.0.0.2", Port: 3128}))
	if e, known, inRange := v.fleet.Endpoint("px-1", 1); !known || !inRange || e.IP != "127.0.0.2" || e.Port != 3128 {
		t.Fatalf("endpoint %+v known %v in range %v", e, known, inRange)
	}
	q := selection.NewQuery(events.AcquireRequest{Selector: map[string]string{"geo": "de"}})
	if got := v.fleet.Next(q, &selection.Cursor{}, nil, 4); len(got) != 1 || got[0].Name != "px-1" {
		t.Fatalf("candidates %+v", got)
	}

	// This replica's grant at 5; the watch then delivers an older write and an older delete.
	v.noteLease("px-1.0", 5, events.Lease{Proxy: "px-1", Token: "mine", AcquiredAt: time.Unix(100, 0)})
	v.applyLease(put("px-1.0", 4, events.Lease{Proxy: "px-1", Token: "older"}))
	v.applyLease(entry{key: "px-1.0", op: jetstream.KeyValueDelete, rev: 3})
	if s, held := v.fleet.Slot("px-1", 0); !held || s.Rev != 5 || s.Lease.Token != "mine" {
		t.Fatalf("slot after late echoes: %+v held %v", s, held)
	}
	// Its TTL runs out: the expiry is reported once, with the revision it had.
	if old := v.applyLease(entry{key: "px-1.0", op: jetstream.KeyValuePurge, rev: 6}); old == nil || old.rev != 5 || old.lease.Token != "mine" {
		t.Fatalf("expired %+v", old)
	}
	if _, held := v.fleet.Slot("px-1", 0); held {
		t.Fatal("the expired slot is still held")
	}

	// A cooldown this replica wrote at 8 outlives the echo of an older removal.
	v.noteCooldown(globalCooldownKey("px-1"), 8, true, time.Time{})
	v.applyCooldown(entry{key: globalCooldownKey("px-1"), op: jetstream.KeyValueDelete, rev: 7})
	if av := v.fleet.Availability(q, selection.NewLearned()); av.CoolingGlobal != 1 || av.Ready != 1 {
		t.Fatalf("availability %+v", av)
	}

	// An unreadable health record changes nothing; a deleted spec makes the proxy unknown.
	v.applyHealth(entry{key: "px-1", value: []byte("{"), op: jetstream.KeyValuePut, rev: 9})
	v.applySpec(entry{key: "px-1", op: jetstream.KeyValueDelete, rev: 10})
	if _, known, _ := v.fleet.Endpoint("px-1", 0); known {
		t.Fatal("a deleted proxy is still known")
	}
	if h, _ := v.fleet.Heard("px-1"); !h.SpecGone || h.SpecRev != 10 || h.StatusRev != 2 {
		t.Fatalf("heard %+v", h)
	}
}

// entry is a KV entry as a watch delivers it, for feeding the view without a server.
type entry struct {
	key   string
	value []byte
	op    jetstream.KeyValueOp
	rev   uint64
}

func (e entry) Bucket() string                  { return "test" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }
