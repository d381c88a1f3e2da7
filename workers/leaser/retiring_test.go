package leaser_test

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// A proxy rolled successor first (decision 98) names its new instance in its status and lists
// the one it replaced as retiring: the leases granted on the retiring instance are not ended
// (no lease is cut to make a change), they renew, and they go only once the status no longer
// lists it (its delete confirmed, which the reconciler sends only when they have ended).
func TestLeasesOnARetiringInstanceRunOn(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "gone", maxLeases: 2, attrs: map[string]string{"pool": "a"}})
	ctx := context.Background()
	old := instanceStatus(time.Unix(1, 0))
	putStatus(r, ctx, old)
	r.startLeasers(2)
	var held events.LeaseGrant
	eventually(t, 5*time.Second, "the instance reaches both views", func() bool {
		var rep reply
		held, rep = r.acquire(events.AcquireRequest{Selector: map[string]string{"pool": "a"}, TTLSeconds: 60})
		return rep.code == 0
	})

	next := instanceStatus(time.Unix(2, 0))
	next.InstanceID, next.IP = "local/gone-2", "127.0.0.11"
	next.Retiring = []events.InstanceRef{{Name: "egress-old", ID: old.InstanceID, Host: old.Host, ProvisionAt: old.ProvisionAt}}
	putStatus(r, ctx, next)
	var fresh events.LeaseGrant
	eventually(t, 5*time.Second, "the successor is leased", func() bool {
		var rep reply
		fresh, rep = r.acquire(events.AcquireRequest{Selector: map[string]string{"pool": "a"}, TTLSeconds: 60})
		if rep.code == 0 && fresh.Host != next.IP {
			// Granted by a view that has not seen the new status yet: given back, or the
			// proxy's last slot would be taken on the old instance and no try could succeed.
			r.release(fresh.ID)
		}
		return rep.code == 0 && fresh.Host == next.IP
	})
	if n, err := r.held("gone"); err != nil || n != 2 {
		t.Fatalf("slots of gone while its old instance retires: %d (%v), want 2", n, err)
	}
	// Restarted views see it the same way, from the records alone.
	r.stopLeasers()
	r.startLeasers(2)
	if _, rep := r.renew(held.ID, 0); rep.code != 0 {
		t.Fatalf("renew the lease on the retiring instance: %d %s", rep.code, rep.err.Message)
	}

	next.Retiring = nil // its delete confirmed
	putStatus(r, ctx, next)
	eventually(t, 10*time.Second, "the lease on the retired instance is removed", func() bool {
		n, _ := r.held("gone")
		return n == 1
	})
	if _, rep := r.renew(held.ID, 0); rep.code != events.CodeGone || rep.err.End != events.ReasonProxyReplaced {
		t.Errorf("renew after the retiring instance went: %d %q %s", rep.code, rep.err.End, rep.err.Message)
	}
	if _, rep := r.renew(fresh.ID, 0); rep.code != 0 {
		t.Errorf("the lease on the successor: %d %s", rep.code, rep.err.Message)
	}
}
