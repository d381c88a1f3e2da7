package kvstore

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// A proxy's lease slots are counted by the instance each was granted on; a slot that names
// none (or does not read) counts under "", and another proxy's slots are not counted.
func TestHeldByInstance(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(proxy string, slot int, instance string) {
		b, _ := json.Marshal(events.Lease{Proxy: proxy, Slot: slot, Instance: instance})
		if _, err := kv.Put(ctx, events.SlotKey(proxy, slot), b); err != nil {
			t.Fatal(err)
		}
	}
	put("p1", 0, "a@t1")
	put("p1", 1, "a@t1")
	put("p1", 2, "b@t2")
	put("p1", 3, "")
	put("p2", 0, "a@t1")
	if _, err := kv.Put(ctx, events.SlotKey("p1", 4), []byte("{")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, events.SlotKey("p1", 1)); err != nil {
		t.Fatal(err)
	}
	got, err := LeaseShards{kvs: []jetstream.KeyValue{kv}}.HeldByInstance(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a@t1": 1, "b@t2": 1, "": 2}; !maps.Equal(got, want) {
		t.Fatalf("held by instance %v, want %v", got, want)
	}
}
