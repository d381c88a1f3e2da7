package kvstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An installation set up by an older egressd lacks the buckets a newer one added. A role
// that names such a bucket creates it, with the configuration setup gives it; a bucket it does
// not name stays missing (and its handle nil); an installation never set up is not one to
// add to.
func TestOpenCreatesTheNamedBucketsThatAreMissing(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	if _, err := kvstore.Open(ctx, js, []string{events.BucketLeaseState}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("Open before any setup: %v, want ErrBucketNotFound", err)
	}
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	want := bucketConfig(t, js, events.BucketLeaseState)
	for _, b := range []string{events.BucketLeaseState, events.BucketProbers} {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	st, err := kvstore.Open(ctx, js, []string{events.BucketProxies, events.BucketLeaseState})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Created, []string{events.BucketLeaseState}) {
		t.Errorf("Created = %v", st.Created)
	}
	if st.LeaseState == nil || st.Proxies == nil || st.Locks == nil || st.Leases.Len() == 0 {
		t.Fatalf("handles: %+v", st)
	}
	if got := bucketConfig(t, js, events.BucketLeaseState); got != want {
		t.Errorf("lease_state created as %+v, setup declares %+v", got, want)
	}
	if st.Probers != nil {
		t.Error("egress_probers was not named, yet has a handle")
	}
	if _, err := js.KeyValue(ctx, events.BucketProbers); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("egress_probers, not named, was made: %v", err)
	}
	// A second role naming it binds what the first made.
	if st, err := kvstore.Open(ctx, js, []string{events.BucketLeaseState}); err != nil || st.LeaseState == nil {
		t.Fatalf("second Open: %v", err)
	}
}

// bucketSummary is what setup decides about a bucket.
type bucketSummary struct {
	History     int64
	MarkerTTL   time.Duration
	Replicas    int
	Description string
}

func bucketConfig(t *testing.T, js jetstream.JetStream, bucket string) bucketSummary {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	return bucketSummary{History: st.History(), MarkerTTL: st.LimitMarkerTTL(), Replicas: cfg.Replicas, Description: cfg.Description}
}

// A role whose NATS user may look at the buckets but not create them fails at once, naming
// the bucket, the subject it lacks and `egressd setup`, instead of waiting for a reply the
// server never sends.
func TestOpenNamesWhatItMayNotCreate(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin-pw"},
			{Username: "role", Password: "role-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>", "$JS.API.INFO"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
			{Username: "bare", Password: "bare-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
		}}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(user, pw string) jetstream.JetStream {
		// Permission violations are read from the connection's last error: silence the
		// default handler's printing.
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pw), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	admin := connect("admin", "admin-pw")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kvstore.Ensure(ctx, admin, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteKeyValue(ctx, events.BucketLeaseState); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ user, denied string }{
		{"role", "$JS.API.STREAM.CREATE.KV_lease_state"}, // may look, and ask for the account's info
		{"bare", "$JS.API.INFO"},                         // may only look
	} {
		t.Run(tc.user, func(t *testing.T) { openDenied(ctx, t, admin, connect(tc.user, tc.user+"-pw"), tc.denied) })
	}
}

func openDenied(ctx context.Context, t *testing.T, admin, role jetstream.JetStream, denied string) {
	// Everything present binds with INFO alone.
	if _, err := kvstore.Open(ctx, role, []string{events.BucketProxies}); err != nil {
		t.Fatalf("Open of present buckets: %v", err)
	}
	_, err := kvstore.Open(ctx, role, []string{events.BucketProxies, events.BucketLeaseState})
	if !errors.Is(err, kvstore.ErrMissing) {
		t.Fatalf("Open naming a missing bucket it may not create: %v, want ErrMissing (last error %v)", err, role.Conn().LastError())
	}
	if ctx.Err() != nil {
		t.Fatalf("Open waited out its budget instead of failing at once: %v", err)
	}
	for _, want := range []string{"bucket lease_state is missing", `denied "` + denied + `"`, "egressd setup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := admin.KeyValue(ctx, events.BucketLeaseState); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("the denied role made the bucket: %v", err)
	}
}
