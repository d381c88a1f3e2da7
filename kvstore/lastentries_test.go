package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// LastEntries reads each matching key's current entry, whatever last happened to it: a
// value, a delete, a purge, or the marker of an expired TTL; keys no filter matches, and
// keys with nothing left, are not there.
func TestLastEntriesReadsEveryKindOfEnd(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	_, js := kvstoretest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "last", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kv.Put(ctx, "a.0", []byte("old")))
	must(kv.Put(ctx, "a.0", []byte("held")))
	must(kv.Put(ctx, "a.1", []byte("x")))
	if err := kv.Delete(ctx, "a.1"); err != nil {
		t.Fatal(err)
	}
	must(kv.Put(ctx, "a.2", []byte("x")))
	if err := kv.Purge(ctx, "a.2"); err != nil {
		t.Fatal(err)
	}
	must(kvstore.CreateTTL(ctx, kv, "a.3", []byte("x"), time.Second))
	must(kv.Put(ctx, "b.0", []byte("other proxy")))
	must(kv.Put(ctx, "ab.0", []byte("not under a.")))

	// The TTL's end leaves the server's marker.
	var got map[string]jetstream.KeyValueEntry
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		es, err := kvstore.LastEntries(ctx, js, kv, []string{"a.*"})
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]jetstream.KeyValueEntry{}
		for _, e := range es {
			got[e.Key()] = e
		}
		if e := got["a.3"]; e != nil && e.Operation() != jetstream.KeyValuePut || time.Now().After(deadline) {
			break
		}
	}
	want := map[string]jetstream.KeyValueOp{"a.0": jetstream.KeyValuePut, "a.1": jetstream.KeyValueDelete,
		"a.2": jetstream.KeyValuePurge, "a.3": jetstream.KeyValuePurge}
	if len(got) != len(want) {
		t.Errorf("read %d keys, want %d: %v", len(got), len(want), keysOf(got))
	}
	for key, op := range want {
		e := got[key]
		switch {
		case e == nil:
			t.Errorf("%s not read", key)
		case e.Operation() != op:
			t.Errorf("%s: %v, want %v", key, e.Operation(), op)
		case e.Bucket() != "last" || e.Revision() == 0:
			t.Errorf("%s: bucket %q revision %d", key, e.Bucket(), e.Revision())
		}
	}
	if e := got["a.0"]; e != nil {
		cur, err := kv.Get(ctx, "a.0")
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Value()) != "held" || e.Revision() != cur.Revision() {
			t.Errorf("a.0: %q at %d, want held at %d", e.Value(), e.Revision(), cur.Revision())
		}
	}

	// LastEntry reads one key as LastEntries does; a key never written is ErrNotFound.
	st, err := js.Stream(ctx, "KV_last")
	if err != nil {
		t.Fatal(err)
	}
	for key, batch := range got {
		e, err := kvstore.LastEntry(ctx, st, kv, key)
		if err != nil {
			t.Errorf("LastEntry %s: %v", key, err)
			continue
		}
		if e.Key() != key || e.Bucket() != "last" || e.Operation() != batch.Operation() || e.Revision() != batch.Revision() || string(e.Value()) != string(batch.Value()) {
			t.Errorf("LastEntry %s: %v at %d %q, LastEntries %v at %d %q", key, e.Operation(), e.Revision(), e.Value(), batch.Operation(), batch.Revision(), batch.Value())
		}
	}
	if e, err := kvstore.LastEntry(ctx, st, kv, "a.never"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Errorf("LastEntry of a key never written: %v, %v; want ErrNotFound", e, err)
	}

	// Several filters in one read; none matching is no entry and no error.
	es, err := kvstore.LastEntries(ctx, js, kv, []string{"b.*", "ab.*"})
	if err != nil || len(es) != 2 {
		t.Errorf("two filters: %d entries, %v; want 2", len(es), err)
	}
	es, err = kvstore.LastEntries(ctx, js, kv, []string{"nothing.*"})
	if err != nil || len(es) != 0 {
		t.Errorf("no match: %d entries, %v; want none, no error", len(es), err)
	}
	// Past the server's limit, an error, never a part read as if it were all.
	for i := range kvstore.MaxLastEntries + 1 {
		k := fmt.Sprintf("many.%d", i)
		must(kv.Put(ctx, k, []byte("x")))

	}
	if es, err := kvstore.LastEntries(ctx, js, kv, []string{"many.*"}); !errors.Is(err, kvstore.ErrTooManyKeys) {
		t.Errorf("%d keys read past the limit of %d: %v, want ErrTooManyKeys", len(es), kvstore.MaxLastEntries, err)
	}
}

func keysOf(m map[string]jetstream.KeyValueEntry) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, ",")
}
