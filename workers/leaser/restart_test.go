package leaser_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func (r *rig) renew(id string, ttlSeconds int) (events.LeaseGrant, reply) {
	r.t.Helper()
	rep := r.call(events.LeaseRenewSubject, events.RenewRequest{ID: id, TTLSeconds: ttlSeconds})
	var lr events.LeaseReply
	if rep.code == 0 {
		if err := json.Unmarshal(rep.body, &lr); err != nil {
			r.t.Fatal(err)
		}
	}
	return lr.Lease, rep
}

// Leases live in KV, not in a replica: after every replica is stopped and new ones start,
// the old IDs renew, report and release, and capacity still counts them.
func TestLeasesSurviveARestartOfEveryLeaser(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 3})
	r.startLeasers(2)
	var held []events.LeaseGrant
	for range 3 {
		held = append(held, r.mustAcquire(events.AcquireRequest{Holder: "c1", TTLSeconds: 60}))
	}
	r.stopLeasers()
	if _, err := r.nc.Request(events.LeaseAcquireSubject, []byte(`{}`), 200*time.Millisecond); err == nil {
		t.Fatal("a stopped service still answered")
	}
	r.startLeasers(2)

	if _, rep := r.acquire(events.AcquireRequest{}); rep.code != events.CodeUnavailable || rep.err.Availability.AtCapacity != 1 {
		t.Fatalf("acquire over three held slots after the restart: %d %+v", rep.code, rep.err.Availability)
	}
	g, rep := r.renew(held[0].ID, 120)
	if rep.code != 0 {
		t.Fatalf("renew after the restart: %d %s", rep.code, rep.err.Message)
	}
	if g.ID != held[0].ID || g.TTLSeconds != 120 || !g.ExpiresAt.After(held[0].ExpiresAt) || g.URL != held[0].URL {
		t.Fatalf("renewed %+v, was %+v", g, held[0])
	}
	// A renewal without ttlSeconds keeps the lease's own TTL.
	if g, _ := r.renew(held[0].ID, 0); g.TTLSeconds != 120 {
		t.Fatalf("renewal without ttlSeconds: TTL %d, want 120", g.TTLSeconds)
	}
	if rr := r.report(events.ReportRequest{ID: held[1].ID, Result: events.ReportOK}); rr.Released || !rr.CooldownUntil.IsZero() {
		t.Fatalf("report ok: %+v", rr)
	}
	if !r.release(held[1].ID) {
		t.Fatal("release after the restart: released false")
	}
	if r.release(held[1].ID) {
		t.Fatal("second release: released true")
	}
	// The freed slot is leased again (by whichever replica; the other may lag a moment).
	eventually(t, 5*time.Second, "the released slot leased again", func() bool {
		var rep reply
		g, rep = r.acquire(events.AcquireRequest{})
		return rep.code == 0
	})
	if g.ID == held[1].ID || g.Proxy != "px-a" {
		t.Fatalf("new grant %s", g.ID)
	}
	if r.slots() != 3 {
		t.Fatalf("%d slots held, want 3", r.slots())
	}
}
