package deploy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// After an upgrade that added a bucket, the first role of the new version to start creates
// it (kvstore.Open) without `egressd setup`: the config lets each role's user create the
// buckets it uses, and only those. Each role here finds one of its buckets missing and makes
// it without a permission violation; a role naming a bucket that is not its own is told what
// is missing and to run setup.
func TestRolesCreateTheBucketsAnUpgradeAdded(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, nil)
	for _, tc := range []struct {
		user    string
		buckets []string
	}{
		{"leaser", []string{events.BucketLeaseState, events.BucketCooldowns, events.BucketPoolDemand}},
		{"prober", []string{events.BucketProbers, events.BucketHealth}},
		{"reconciler", []string{events.BucketPoolStatus, events.BucketProviderHealth, events.BucketPoolDemand, events.BucketQuarantine}},
		{"provisioner-local", []string{events.BucketProviderHealth, events.BucketCatalog, events.BucketQuarantine}},
	} {
		for _, b := range tc.buckets {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := admin.js.DeleteKeyValue(ctx, b); err != nil {
				t.Fatal(err)
			}
			cancel()
		}
		role := ts.connect(t, tc.user)
		role.mustAllow(t, "create "+strings.Join(tc.buckets, " and "), func(ctx context.Context) error {
			st, err := kvstore.Open(ctx, role.js, tc.buckets)
			if err == nil && len(st.Created) != len(tc.buckets) {
				err = errors.New("created " + strings.Join(st.Created, ", "))
			}
			return err
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.js.DeleteKeyValue(ctx, events.BucketLeaseState); err != nil {
		t.Fatal(err)
	}
	prober := ts.connect(t, "prober")
	_, err := kvstore.Open(ctx, prober.js, []string{events.BucketLeaseState})
	if !errors.Is(err, kvstore.ErrMissing) || !strings.Contains(err.Error(), "bucket lease_state is missing") ||
		!strings.Contains(err.Error(), "$JS.API.STREAM.CREATE.KV_lease_state") || !strings.Contains(err.Error(), "egressd setup") {
		t.Fatalf("the prober naming the leaser's bucket: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the denial was waited out, not seen")
	}
	if _, err := admin.js.KeyValue(ctx, events.BucketLeaseState); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("lease_state after the prober's denied create: %v", err)
	}
}
