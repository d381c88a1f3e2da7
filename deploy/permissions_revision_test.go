package deploy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
)

// Reads the roles make outside a key's subject or of one lock: the prober and the leaser read
// a proxy spec at the revision its instance was built from (the credentials it carries,
// decision 86: a direct get by sequence, whose subject names no key), and the reconciler's
// pool controller reads the rollout pause. Both were denied in the cluster tests' logs until
// the config allowed them: the reads retried and the proxies waited.
func TestRevisionAndRolloutPauseReads(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, nil)
	ctx := context.Background()
	proxies, err := admin.js.KeyValue(ctx, events.BucketProxies)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := proxies.Put(ctx, "crawl-1", []byte(`{"provider":"local"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxies.Put(ctx, "crawl-1", []byte(`{"provider":"local","port":8080}`)); err != nil {
		t.Fatal(err)
	}
	locks, err := admin.js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Put(ctx, events.RolloutPauseKey, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"prober", "leaser"} {
		c := ts.connect(t, user)
		c.mustAllow(t, "read a spec at an earlier revision", func(ctx context.Context) error {
			kv, err := c.js.KeyValue(ctx, events.BucketProxies)
			if err != nil {
				return err
			}
			e, err := kv.GetRevision(ctx, "crawl-1", rev)
			if err != nil {
				return err
			}
			if string(e.Value()) != `{"provider":"local"}` {
				return fmt.Errorf("revision %d holds %s", rev, e.Value())
			}
			return nil
		})
	}
	rc := ts.connect(t, "reconciler")
	rc.mustAllow(t, "read the rollout pause", func(ctx context.Context) error {
		kv, err := rc.js.KeyValue(ctx, events.BucketLocks)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, events.RolloutPauseKey)
		return err
	})
	rc.mustDeny(t, "write the rollout pause", "$KV.egress_locks."+events.RolloutPauseKey, kvPut(rc, events.BucketLocks, events.RolloutPauseKey))
	crawler := ts.connect(t, "crawler")
	crawler.mustDeny(t, "read a spec at a revision", "$JS.API.DIRECT.GET.KV_proxies", func(ctx context.Context) error {
		_, err := crawler.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_proxies", []byte(fmt.Sprintf(`{"seq":%d}`, rev)))
		return err
	})
}
