package provisioner_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// A create is given what is in quarantine now (CreateRequest.Avoid): each live record's
// prefix and instance address, once; an ended record and one that does not decode avoid nothing. The margins are
// an hour, so the test does not depend on the clock.
func TestCreateIsGivenTheQuarantine(t *testing.T) {
	r := newRig(t)
	now := time.Now()
	for _, q := range []events.Quarantine{
		{Address: "203.0.113.10", Prefix: "203.0.113.0/24", Until: now.Add(time.Hour)},
		{Address: "2001:db8::7", Prefix: "2001:db8::7/128", Instance: "10.0.0.7", Until: now.Add(time.Hour)},
		{Address: "198.51.100.1", Prefix: "198.51.100.1/32", Until: now.Add(-time.Hour)}, // ended
	} {
		q.V, q.Pool, q.Proxy, q.Reason, q.At = 1, "web", "web-a", events.ReasonBurned, now.Add(-2*time.Hour)
		if _, err := kvstore.PutJSON(context.Background(), r.store.Quarantine, events.QuarantineKey(q.Address), q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.store.Quarantine.Put(context.Background(), "garbage", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	op := createOp(r, "p1", `{"provider":"fake"}`)
	r.publish(op)
	if res := r.result(); res.ErrorClass != events.ClassNone {
		t.Fatalf("result %+v", res)
	}
	req, _ := r.fake.Request(op.InstanceName)
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::7/128")}
	if !slices.Equal(req.Avoid, want) {
		t.Errorf("Avoid %v, want %v", req.Avoid, want)
	}
}

// A quarantine that cannot be read fails the create as transient, without calling the
// provider: a burned address is never handed out because NATS could not say it is burned.
func TestUnreadableQuarantineFailsClosed(t *testing.T) {
	r := newRig(t)
	if err := r.store.JS.DeleteKeyValue(context.Background(), events.BucketQuarantine); err != nil {
		t.Fatal(err)
	}
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	if res := r.result(); res.ErrorClass != events.ClassTransient || res.Final {
		t.Fatalf("result %+v, want a transient failure", res)
	}
	if n := r.fake.Calls("create"); n != 0 {
		t.Fatalf("Create called %d times without the quarantine", n)
	}
}
