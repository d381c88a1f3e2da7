package leaser

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestCreatingClaimsEachSlotOnce(t *testing.T) {
	c := newCreating()
	steps := []struct {
		op, proxy, key string
		want           bool // take's answer, or busy's
	}{
		{"take", "px-a", "px-a.0", true},
		{"take", "px-a", "px-a.0", false}, // being created by another request
		{"take", "px-a", "px-a.1", true},
		{"busy", "px-a", "", true},
		{"busy", "px-b", "", false},
		{"drop", "px-a", "px-a.0", false},
		{"busy", "px-a", "", true}, // px-a.1 still
		{"drop", "px-a", "px-a.1", false},
		{"busy", "px-a", "", false},
		{"take", "px-a", "px-a.0", true}, // free to claim again
	}
	for i, s := range steps {
		var got bool
		switch s.op {
		case "take":
			got = c.take(s.proxy, s.key)
		case "busy":
			got = c.busy(s.proxy)
		case "drop":
			c.drop(s.proxy, s.key)
		}
		if got != s.want {
			t.Fatalf("step %d %s %s %s: %v, want %v", i, s.op, s.proxy, s.key, got, s.want)
		}
	}
}

func TestOnlySpreadingStrategiesTryABusyProxyLast(t *testing.T) {
	for s, want := range map[events.Strategy]bool{
		"": true, events.StrategyBalanced: true, events.StrategyRoundRobin: true, events.StrategyRandom: true,
		events.StrategyPacked: false, events.StrategyLowestLatency: false, events.StrategyBestForTarget: false,
	} {
		if got := spreads(s); got != want {
			t.Errorf("spreads(%q) = %v, want %v", s, got, want)
		}
	}
}

// A second try of one request waits for the first on this replica, and gives up with its
// context; tries of other requests do not wait.
func TestTriesOfOneRequestRunOneAtATime(t *testing.T) {
	tr := newTries()
	unlock, err := tr.lock(t.Context(), "request.a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tr.lock(t.Context(), "request.b")
	if err != nil {
		t.Fatal(err)
	}
	other()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := tr.lock(ctx, "request.a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second try with its context ended: %v, want context.Canceled", err)
	}
	var second atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		u, err := tr.lock(t.Context(), "request.a")
		if err != nil {
			t.Error(err)
			return
		}
		second.Store(true)
		u()
	}()
	if second.Load() {
		t.Fatal("the second try ran while the first held the request")
	}
	unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second try did not run once the first ended")
	}
}

// Requests handed to the gate all run, on its workers, and close waits for them; after
// close a request runs in the caller.
func TestGateRunsEveryRequestAndCloseWaits(t *testing.T) {
	g := newGate(2)
	var ran atomic.Int64
	for range 10 {
		g.run(func() { ran.Add(1) })
	}
	g.close()
	if n := ran.Load(); n != 10 {
		t.Fatalf("%d requests ran before close returned, want 10", n)
	}
	g.run(func() { ran.Add(1) })
	if n := ran.Load(); n != 11 {
		t.Fatalf("a request after close ran %d times in all, want it run in place", n-10)
	}
	g.close() // again: nothing to wait for
}
