package leaser_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// setPhase rewrites a seeded proxy's status with another phase, as the reconciler would.
func (r *rig) setPhase(name string, phase events.Phase) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, _, err := kvstore.Get(ctx, r.store.Status, name)
	if err != nil {
		r.t.Fatal(err)
	}
	var st events.ProxyStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		r.t.Fatal(err)
	}
	st.Phase = phase
	if _, err := kvstore.PutJSON(ctx, r.store.Status, name, st); err != nil {
		r.t.Fatal(err)
	}
}

// A session keeps its proxy across leases, releases and replicas for its lifetime, though
// the balanced order would move on after every release; then it is free again.
func TestStickySessionKeepsItsProxyForItsLifetime(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 5}, proxy{name: "px-b", maxLeases: 5}, proxy{name: "px-c", maxLeases: 5})
	r.startLeasers(3) // requests land on any of them
	req := events.AcquireRequest{TTLSeconds: 60, Sticky: "s42", SessionSeconds: 3}
	first := r.mustAcquire(req)
	r.release(first.ID)
	for i := range 10 {
		g := r.mustAcquire(req)
		if g.Proxy != first.Proxy {
			t.Fatalf("lease %d of the session on %s, the session is bound to %s", i, g.Proxy, first.Proxy)
		}
		r.release(g.ID)
		// Another crawler's lease moves the balanced order on meanwhile.
		r.release(r.mustAcquire(events.AcquireRequest{TTLSeconds: 60}).ID)
	}
	if n := r.keys(r.store.LeaseState); n != 1 {
		t.Fatalf("%d keys in lease_state, want the session's", n)
	}
	// Past its lifetime the key is no session any more: the balanced order, which leased
	// the session's proxy last, picks another.
	eventually(t, 10*time.Second, "the session expires", func() bool { return r.keys(r.store.LeaseState) == 0 })
	// A replica whose watch has not yet delivered the last releases (a loaded machine) may
	// still rank the session's proxy first and bind a new session of the same key to it for
	// its lifetime; once that one ends too, the key must move on. A session that never ended
	// would keep px-a past the deadline.
	eventually(t, 20*time.Second, "the key moves off the ended session's proxy", func() bool {
		g := r.mustAcquire(req)
		r.release(g.ID)
		return g.Proxy != first.Proxy
	})
}

// A strict session whose proxy goes Unhealthy gets an error naming why; a soft one moves to
// another proxy and the session follows it.
func TestStrictSessionFailsAndSoftMovesWhenItsProxyGoesUnhealthy(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 1}, proxy{name: "px-b", maxLeases: 5}, proxy{name: "px-c", maxLeases: 5})
	r.startLeasers(2)
	strict := events.AcquireRequest{TTLSeconds: 60, Sticky: "strict-1", SessionSeconds: 600, StickyMode: events.StickyStrict}
	soft := events.AcquireRequest{TTLSeconds: 60, Sticky: "soft-1", SessionSeconds: 600, StickyMode: events.StickySoft}
	gs := r.mustAcquire(strict)
	r.release(gs.ID)
	gf := r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Sticky: "soft-1", SessionSeconds: 600, Selector: map[string]string{}})
	r.release(gf.ID)
	if gs.Proxy != "px-a" {
		t.Fatalf("strict session on %s", gs.Proxy)
	}

	// At capacity: the strict session waits for its proxy rather than move.
	other := r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Selector: map[string]string{}, Sticky: "x"})
	for other.Proxy != "px-a" {
		other = r.mustAcquire(events.AcquireRequest{TTLSeconds: 60})
	}
	_, rep := r.acquire(strict)
	if rep.code != events.CodeUnavailable || rep.err.Reason != events.ErrorSessionUnavailable || rep.err.Session == nil ||
		rep.err.Session.Cause != events.SessionProxyAtCapacity || rep.err.Session.Proxy != "px-a" {
		t.Fatalf("strict session on a full proxy: %d %+v", rep.code, rep.err)
	}
	r.release(other.ID)

	r.setPhase(gs.Proxy, events.PhaseUnhealthy)
	r.setPhase(gf.Proxy, events.PhaseUnhealthy)
	eventually(t, 5*time.Second, "the strict session refused", func() bool {
		_, rep = r.acquire(strict)
		return rep.code != 0
	})
	d := rep.err
	if rep.code != events.CodeUnavailable || d.Reason != events.ErrorSessionUnavailable || d.Session == nil ||
		d.Session.Proxy != gs.Proxy || d.Session.Cause != events.SessionProxyNotReady || d.Session.Phase != events.PhaseUnhealthy ||
		!strings.Contains(d.Message, "bound to proxy "+gs.Proxy) || !strings.Contains(d.Message, "Unhealthy") ||
		!strings.Contains(rep.header, "Unhealthy") {
		t.Fatalf("strict session of an Unhealthy proxy: %d %q %+v", rep.code, rep.header, d)
	}
	// Each replica's view learns of the phase through its watch: a soft session follows the
	// view, so it may take a moment to move.
	var moved events.LeaseGrant
	eventually(t, 5*time.Second, "the soft session moves", func() bool {
		moved = r.mustAcquire(soft)
		r.release(moved.ID)
		return moved.Proxy != gf.Proxy
	})
	// The session follows the move, also when its old proxy is Ready again and the balanced
	// order prefers it, and a strict acquire of it now finds it on the new proxy.
	r.setPhase(gf.Proxy, events.PhaseReady)
	time.Sleep(100 * time.Millisecond)
	for range 3 {
		g := r.mustAcquire(events.AcquireRequest{TTLSeconds: 60, Sticky: "soft-1", SessionSeconds: 600, StickyMode: events.StickyStrict})
		if g.Proxy != moved.Proxy {
			t.Fatalf("moved session leased %s, bound to %s", g.Proxy, moved.Proxy)
		}
		r.release(g.ID)
	}
}

// Two acquires starting one strict session at once on different replicas end on one proxy.
func TestStrictSessionStartedTwiceAtOnceBindsOneProxy(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 50}, proxy{name: "px-b", maxLeases: 50}, proxy{name: "px-c", maxLeases: 50})
	r.startLeasers(3)
	for round := range 5 {
		req := events.AcquireRequest{TTLSeconds: 60, Sticky: "race-" + string(rune('a'+round)), SessionSeconds: 600, StickyMode: events.StickyStrict}
		type result struct{ proxy, err string }
		got := make(chan result, 8)
		for range 8 {
			go func() {
				g, rep := r.acquire(req)
				if rep.code != 0 {
					got <- result{err: rep.err.Message}
					return
				}
				got <- result{proxy: g.Proxy}
			}()
		}
		// Every granted lease is on one proxy, and at least one is granted: a race that
		// failed every acquire alike would bind no session and prove nothing.
		bound, granted := "", 0
		for range 8 {
			res := <-got
			if res.err != "" {
				t.Logf("round %d: an acquire failed: %s", round, res.err)
				continue
			}
			if granted++; bound == "" {
				bound = res.proxy
			} else if res.proxy != bound {
				t.Fatalf("round %d: the session's leases on %s and %s", round, bound, res.proxy)
			}
		}
		if granted == 0 {
			t.Fatalf("round %d: no acquire was granted, so no session was bound", round)
		}
	}
}
