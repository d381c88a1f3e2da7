package pools

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a KV entry as a watch delivers it.
type entry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "proxies" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.val }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return t0 }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// The watch may deliver the controller's own write after it folded that write in, and after
// it deleted the spec: neither brings a deleted member back, nor an older spec over a newer.
func TestViewIgnoresWhatTheWatchDeliversLate(t *testing.T) {
	v := newView()
	drained := []byte(`{"provider":"local","pool":"web","drain":true}`)
	v.notePut("web-x", drained, 10)
	v.applyProxy(entry{key: "web-x", val: []byte(`{"provider":"local","pool":"web"}`), rev: 9, op: jetstream.KeyValuePut})
	if s := v.snapshot("web", nil).owned["web-x"]; s.rev != 10 || s.spec == nil || !s.spec.Drain {
		t.Fatalf("an older put replaced the newer spec: %+v", s)
	}
	v.noteDelete("web-x", 10)
	v.applyProxy(entry{key: "web-x", val: drained, rev: 10, op: jetstream.KeyValuePut})
	if v.taken("web-x") {
		t.Fatal("a spec deleted by the controller came back from a late watch event")
	}
	v.applyProxy(entry{key: "web-x", rev: 11, op: jetstream.KeyValueDelete})
	v.applyProxy(entry{key: "web-x", val: drained, rev: 12, op: jetstream.KeyValuePut})
	if !v.taken("web-x") {
		t.Fatal("a new spec under the name, after the delete, is not seen")
	}
}

// A member's lifetime reaches the planner from its status: the end its instance's mark gives
// (expiresAt) and when its create began; a status without one, or gone, gives none.
func TestViewReadsMembersLifetimes(t *testing.T) {
	v := newView()
	v.applyProxy(entry{key: "web-x", val: []byte(`{"provider":"local","pool":"web"}`), rev: 1, op: jetstream.KeyValuePut})
	v.applyStatus(entry{key: "web-x", val: []byte(`{"v":1,"phase":"Running","provisionAt":"2026-12-01T12:00:00Z","expiresAt":"2026-12-01T13:00:00Z"}`), rev: 2, op: jetstream.KeyValuePut})
	want := expiry{from: t0, until: t0.Add(time.Hour)}
	if got := v.snapshot("web", nil).expiry["web-x"]; got != want {
		t.Fatalf("expiry %+v, want %+v", got, want)
	}
	v.applyStatus(entry{key: "web-x", val: []byte(`{"v":1,"phase":"Provisioning"}`), rev: 3, op: jetstream.KeyValuePut})
	if got, ok := v.snapshot("web", nil).expiry["web-x"]; ok {
		t.Fatalf("a status without expiresAt still gives %+v", got)
	}
	v.applyStatus(entry{key: "web-x", val: []byte(`{"v":1,"expiresAt":"2026-12-01T13:00:00Z"}`), rev: 4, op: jetstream.KeyValuePut})
	v.applyStatus(entry{key: "web-x", rev: 5, op: jetstream.KeyValueDelete})
	if got, ok := v.snapshot("web", nil).expiry["web-x"]; ok {
		t.Fatalf("a deleted status still gives %+v", got)
	}
}
