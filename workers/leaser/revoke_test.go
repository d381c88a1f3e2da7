package leaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go/jetstream"
)

// A lease-mode token names the instance it was issued for (the status's generation) and
// verifies only with that instance's key. A lease that ends early (released, or reported
// blocked with release) is revoked: revoked.<lease ID> in lease_state, until its last token's
// expiry plus the skew. A lease on a proxy with a static password carries no token and is not
// revoked.
func TestEarlyEndsAreRevoked(t *testing.T) {
	master := leaseauth.NewMaster()
	r := newRig(t, func(c *leaser.Config) { c.LeaseMaster = master })
	r.seed(proxy{name: "px-lease", maxLeases: 2, attrs: map[string]string{"k": "lease"}},
		proxy{name: "px-static", maxLeases: 1, attrs: map[string]string{"k": "static"}, auth: &[2]string{"u", "p"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := map[string]any{"provider": "local", "maxLeases": 2, "attributes": map[string]string{"k": "lease"}, "auth": map[string]string{"mode": "lease"}}
	if _, err := kvstore.PutJSON(ctx, r.store.Proxies, "px-lease", spec); err != nil {
		t.Fatal(err)
	}
	st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local",
		IP: "127.0.0.10", Port: 3128, Generation: "g7"}
	if _, err := kvstore.PutJSON(ctx, r.store.Status, "px-lease", st); err != nil {
		t.Fatal(err)
	}
	r.startLeasers(1)

	revocation := func(id string) (events.LeaseRevocation, bool) {
		t.Helper()
		e, err := r.store.LeaseState.Get(ctx, events.RevocationKey(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return events.LeaseRevocation{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		var rev events.LeaseRevocation
		if err := json.Unmarshal(e.Value(), &rev); err != nil {
			t.Fatal(err)
		}
		return rev, true
	}

	released := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"k": "lease"}, TTLSeconds: 60})
	u, _ := url.Parse(released.URL)
	pass, _ := u.User.Password()
	if tok, err := leaseauth.ParseToken(pass); err != nil || tok.Instance != "g7" || tok.KeyID != master.ID() {
		t.Fatalf("the token names instance %q, master %q (%v); want g7, %s", tok.Instance, tok.KeyID, err, master.ID())
	}
	if err := master.InstanceKey("px-lease", "g7").Verify(u.User.Username(), pass, time.Now()); err != nil {
		t.Fatalf("the instance's key refuses its token: %v", err)
	}
	if err := master.InstanceKey("px-lease", "g6").Verify(u.User.Username(), pass, time.Now()); !errors.Is(err, leaseauth.ErrInstance) {
		t.Fatalf("another instance's key: %v, want ErrInstance", err)
	}
	if _, ok := revocation(released.ID); ok {
		t.Fatal("a held lease is revoked")
	}
	r.release(released.ID)
	rev, ok := revocation(released.ID)
	if !ok || rev.Proxy != "px-lease" || rev.Reason != events.ReasonReleased || !rev.Until.Equal(released.ExpiresAt.Add(leaseauth.Skew)) {
		t.Fatalf("the released lease's revocation: %+v (%v), want until %v", rev, ok, released.ExpiresAt.Add(leaseauth.Skew))
	}

	blocked := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"k": "lease"}, TTLSeconds: 30})
	r.report(events.ReportRequest{ID: blocked.ID, Result: events.ReportBlocked, Target: "example.com", Release: true})
	if _, ok := revocation(blocked.ID); !ok {
		t.Fatal("a lease reported blocked with release is not revoked")
	}

	static := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{"k": "static"}, TTLSeconds: 30})
	r.release(static.ID)
	if _, ok := revocation(static.ID); ok {
		t.Fatal("a static-password lease was revoked")
	}
}
