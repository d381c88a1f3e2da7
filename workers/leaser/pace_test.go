package leaser_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
)

// Pacing: two acquires for one target within the pace never get the same proxy, whichever
// replica serves them; once every proxy is paced the refusal says when the first may be
// granted again (nextAllowedAt), and a waiting acquire gets it then. Other targets, and
// acquires that ask for no pacing on a leaser without a default, are not held back. A block
// already cooling a proxy for the target is not shortened by a pace.
func TestPacing(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 10}, proxy{name: "px-b", maxLeases: 10})
	r.startLeasers(3)
	const pace = 30
	seen := map[string]bool{}
	for range 2 {
		g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "shop.example", PaceSeconds: pace})
		if seen[g.Proxy] {
			t.Fatalf("%s granted twice for shop.example within the pace", g.Proxy)
		}
		seen[g.Proxy] = true
	}
	before := time.Now()
	_, rep := r.acquire(events.AcquireRequest{Holder: "c1", Target: "shop.example", PaceSeconds: pace})
	if rep.code != events.CodeUnavailable || rep.err.Availability == nil {
		t.Fatalf("third acquire within the pace: %d %s, want 503", rep.code, rep.err.Message)
	}
	av := rep.err.Availability
	if av.CoolingTarget != 2 || av.NextAllowedAt.IsZero() || av.NextAllowedAt.After(before.Add(pace*time.Second)) ||
		av.NextAllowedAt.Before(before.Add((pace-10)*time.Second)) {
		t.Fatalf("refusal availability %+v: want 2 cooling for the target, the next allowed within %ds", *av, pace)
	}
	if g := r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "news.example", PaceSeconds: pace}); g.Proxy == "" {
		t.Fatal("another target held back")
	}

	// Ten acquires at once for one target, over three replicas: one grant per proxy.
	results := make(chan int, 10)
	for range 10 {
		go func() {
			_, rep := r.acquire(events.AcquireRequest{Holder: "c4", Target: "burst.example", PaceSeconds: pace})
			results <- int(rep.code)
		}()
	}
	granted := 0
	for range 10 {
		if <-results == 0 {
			granted++
		}
	}
	if granted != 2 {
		t.Fatalf("%d of 10 concurrent acquires for one target granted on 2 proxies with pacing, want 2", granted)
	}

	// A waiting acquire is answered once the first mark ends, not before.
	for range 2 {
		r.mustAcquire(events.AcquireRequest{Holder: "c2", Target: "slow.example", PaceSeconds: 5})
	}
	_, rep = r.acquire(events.AcquireRequest{Holder: "c2", Target: "slow.example", PaceSeconds: 5})
	if rep.code != events.CodeUnavailable || rep.err.Availability.NextAllowedAt.IsZero() {
		t.Fatalf("acquire within the pace: %d %+v", rep.code, rep.err.Availability)
	}
	next := rep.err.Availability.NextAllowedAt
	g := r.mustAcquire(events.AcquireRequest{Holder: "c2", Target: "slow.example", PaceSeconds: 5, WaitSeconds: 30})
	if now := time.Now(); now.Before(next.Add(-time.Second)) {
		t.Fatalf("the waiting acquire got %s at %v, before the first pace ended at %v", g.Proxy, now, next)
	}

	// A block outlasts a pace: the proxy stays out for the block's cooldown.
	g = r.mustAcquire(events.AcquireRequest{Holder: "c3", Target: "block.example", PaceSeconds: 1})
	r.report(events.ReportRequest{ID: g.ID, Result: events.ReportBlocked, Target: "block.example", CooldownSeconds: 600})
	time.Sleep(1500 * time.Millisecond) // past the pace, well within the block
	for range 4 {
		g2 := r.mustAcquire(events.AcquireRequest{Holder: "c3", Target: "block.example", PaceSeconds: 1})
		if g2.Proxy == g.Proxy {
			t.Fatalf("%s granted for block.example during its block", g.Proxy)
		}
		time.Sleep(1100 * time.Millisecond)
	}
}

func TestBadPace(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) {})
	r.seed(proxy{name: "px-a", maxLeases: 1})
	r.startLeasers(1)
	for body, want := range map[string]string{
		`{"paceSeconds":5}`:                           "needs target",
		`{"target":"a.example","paceSeconds":-1}`:     "between 0 and 3600",
		`{"target":"a.example","paceSeconds":3601}`:   "between 0 and 3600",
		`{"target":"a.example","paceSeconds":"soon"}`: "paceSeconds",
	} {
		rep := r.call(events.LeaseAcquireSubject, json.RawMessage(body))
		if rep.code != events.CodeBadRequest || !strings.Contains(rep.err.Message, want) {
			t.Errorf("%s: %d %q, want 400 with %q", body, rep.code, rep.err.Message, want)
		}
	}
}
