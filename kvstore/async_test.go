package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

func TestWriteAsyncMeansWriteJSON(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv := st.Status
	// Each case prepares its key and returns the revision to write at.
	for _, tc := range []struct {
		name    string
		prepare func(key string) uint64
		want    error
	}{
		{"create an absent key", func(string) uint64 { return 0 }, nil},
		{"create over a present key", func(key string) uint64 {
			if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			return 0
		}, kvstore.ErrConflict},
		{"create over a deleted key", func(key string) uint64 {
			if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			return 0
		}, nil},
		{"update at the latest revision", func(key string) uint64 {
			rev, err := kv.Put(ctx, key, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			return rev
		}, nil},
		{"update at a stale revision (a deposed writer)", func(key string) uint64 {
			rev, err := kv.Put(ctx, key, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Update(ctx, key, []byte(`{"n":1}`), rev); err != nil {
				t.Fatal(err)
			}
			return rev
		}, kvstore.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("k%d", time.Now().UnixNano())
			rev := tc.prepare(key)
			p, err := kvstore.WriteAsync(js, kv, key, []byte(`{"n":2}`), rev)
			if err != nil {
				t.Fatal(err)
			}
			nrev, err := p.Wait(ctx)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Wait: %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			e, err := kv.Get(ctx, key)
			if err != nil || e.Revision() != nrev || string(e.Value()) != `{"n":2}` {
				t.Fatalf("read back rev %d want %d, %q, %v", e.Revision(), nrev, e.Value(), err)
			}
		})
	}
}

// Many writes in flight at once, to different keys, each land at its own revision.
func TestWriteAsyncPipelines(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*kvstore.Pending
	for i := range 200 {
		p, err := kvstore.WriteAsync(js, st.Status, fmt.Sprintf("p%d", i), []byte(`{}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	seen := map[uint64]bool{}
	for i, p := range ps {
		rev, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("p%d: %v", i, err)
		}
		if seen[rev] {
			t.Fatalf("revision %d twice", rev)
		}
		seen[rev] = true
		if _, err := kvstore.UpdateJSON(ctx, st.Status, fmt.Sprintf("p%d", i), map[string]int{"n": 1}, rev); err != nil {
			t.Fatalf("p%d at its revision %d: %v", i, rev, err)
		}
	}
}

// Await gives up when its context ends, and reports a publish no stream took.
func TestAwaitFailures(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	f, err := js.PublishAsync("nostream.here", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvstore.Await(ctx, f); err == nil {
		t.Fatal("a publish no stream takes was acked")
	}
	f, err = js.PublishAsync("nostream.there", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := kvstore.Await(done, f); err == nil {
		t.Fatal("Await with an ended context returned no error")
	}
}
