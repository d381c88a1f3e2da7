package leaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// The slots of a deleted or replaced proxy are removed promptly by the leasers (two replicas
// here, both finding them), their holders' renewals are answered 410 with why, each ending
// is one event, and the leases of other proxies and of the new instance stay.
func TestSlotsOfADeletedOrReplacedProxyAreRemoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  events.Reason
		// change deletes or replaces "gone"; it returns the status of the new instance, if any.
		change func(r *rig, ctx context.Context) *events.ProxyStatus
	}{
		{"deleted", events.ReasonProxyDeleted, func(r *rig, ctx context.Context) *events.ProxyStatus {
			if err := r.store.Proxies.Delete(ctx, "gone"); err != nil {
				r.t.Fatal(err)
			}
			return nil
		}},
		{"replaced", events.ReasonProxyReplaced, func(r *rig, ctx context.Context) *events.ProxyStatus {
			// As the reconciler does it: the old instance must go, then it is gone, then a new
			// one under the same name and ID is Ready.
			st := instanceStatus(time.Unix(1, 0))
			st.Phase, st.Teardown = events.PhaseReplacing, "SpecChanged"
			putStatus(r, ctx, st)
			putStatus(r, ctx, events.ProxyStatus{V: 1, Phase: events.PhaseProvisioning, Mode: "managed", Provider: "local", Host: "local"})
			next := instanceStatus(time.Unix(2, 0))
			putStatus(r, ctx, next)
			return &next
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.seed(proxy{name: "gone", maxLeases: 2, attrs: map[string]string{"pool": "a"}},
				proxy{name: "stays", maxLeases: 1, attrs: map[string]string{"pool": "b"}})
			ctx := context.Background()
			putStatus(r, ctx, instanceStatus(time.Unix(1, 0)))
			r.startLeasers(2)
			var held []events.LeaseGrant
			eventually(t, 5*time.Second, "the instance reaches both views", func() bool {
				g, rep := r.acquire(events.AcquireRequest{Selector: map[string]string{"pool": "a"}, TTLSeconds: 60})
				if rep.code == 0 {
					held = append(held, g)
				}
				return rep.code == 0
			})
			held = append(held, r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"pool": "a"}, TTLSeconds: 60}))
			other := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"pool": "b"}, TTLSeconds: 60})

			next := tc.change(r, ctx)
			eventually(t, 10*time.Second, "the slots of gone are removed", func() bool {
				n, _ := r.held("gone")
				return n == 0
			})
			for _, g := range held {
				_, rep := r.renew(g.ID, 0)
				if rep.code != events.CodeGone || rep.err.End != tc.end || rep.err.Field != "id" {
					t.Errorf("renew %s after the proxy %s: %d %q %s", g.ID, tc.name, rep.code, rep.err.End, rep.err.Message)
				}
				if r.release(g.ID) {
					t.Errorf("release of the ended lease %s released something", g.ID)
				}
			}
			if _, rep := r.renew(other.ID, 0); rep.code != 0 {
				t.Errorf("the lease of another proxy: %d %s", rep.code, rep.err.Message)
			}
			eventually(t, 5*time.Second, "one event per ended lease", func() bool {
				return r.countEvents(events.KindLease, tc.end) >= len(held)
			})
			if next == nil {
				return
			}
			// A lease on the new instance is never removed, whatever the views see next.
			var fresh events.LeaseGrant
			eventually(t, 5*time.Second, "the new instance is leased", func() bool {
				var rep reply
				fresh, rep = r.acquire(events.AcquireRequest{Selector: map[string]string{"pool": "a"}, TTLSeconds: 60})
				return rep.code == 0
			})
			next.ReadyAt = time.Unix(3, 0) // a later write of the same instance
			putStatus(r, ctx, *next)
			r.stopLeasers()
			r.startLeasers(2) // and views built from scratch
			if _, rep := r.renew(fresh.ID, 0); rep.code != 0 {
				t.Fatalf("the lease on the new instance: %d %s", rep.code, rep.err.Message)
			}
			if n := r.countEvents(events.KindLease, tc.end); n != len(held) {
				t.Errorf("%d %s events for %d leases (the stream keeps one per lease by its ID)", n, tc.end, len(held))
			}
		})
	}
}

// instanceStatus is gone's Ready status on the instance created at at.
func instanceStatus(at time.Time) events.ProxyStatus {
	return events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local",
		InstanceID: "local/gone", ProvisionAt: at, IP: "127.0.0.10", Port: 3128}
}

func putStatus(r *rig, ctx context.Context, st events.ProxyStatus) {
	r.t.Helper()
	if _, err := kvstore.PutJSON(ctx, r.store.Status, "gone", st); err != nil {
		r.t.Fatal(err)
	}
}

// held is how many slots proxy holds, read from its shard.
func (r *rig) held(proxy string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := r.store.Leases.Of(proxy).ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Stop() }()
	n := 0
	for k := range l.Keys() {
		if len(k) > len(proxy) && k[:len(proxy)+1] == proxy+"." {
			n++
		}
	}
	return n, nil
}

// countEvents counts the events of kind and reason stored in the event streams.
func (r *rig) countEvents(kind events.EventKind, reason events.Reason) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	for _, ev := range r.storedEvents(ctx) {
		if ev.Kind == kind && ev.Reason == reason {
			n++
		}
	}
	return n
}

// storedEvents reads every event in both event streams, the lifecycle's first.
func (r *rig) storedEvents(ctx context.Context) []events.Event {
	r.t.Helper()
	return append(r.streamEvents(ctx, events.StreamEvents), r.streamEvents(ctx, events.StreamLeaseEvents)...)
}

func (r *rig) streamEvents(ctx context.Context, name string) []events.Event {
	r.t.Helper()
	js := r.store.JS
	st, err := js.Stream(ctx, name)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []events.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, context.DeadlineExceeded) {
			r.t.Fatal(err)
		}
		if err != nil {
			continue
		}
		var ev events.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}
