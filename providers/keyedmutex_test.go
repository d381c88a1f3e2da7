package providers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeyedMutex(t *testing.T) {
	var k KeyedMutex
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			unlock, err := k.Lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			unlock()
			unlock() // twice is harmless
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders of one key at once", most.Load())
	}
	unlockA, _ := k.Lock(context.Background(), "a")
	if unlockB, err := k.Lock(context.Background(), "b"); err != nil {
		t.Fatal("another key must not wait")
	} else {
		unlockB()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := k.Lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held key with an ending context: %v", err)
	}
	unlockA()
	if len(k.keys) != 0 {
		t.Fatalf("entries left: %d", len(k.keys))
	}
}
