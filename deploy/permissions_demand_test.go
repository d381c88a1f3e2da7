package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
)

// pool_demand: the leaser binds every bucket and writes its demand records (with a TTL); the
// pool controller (the reconciler's user) and the viewer read and watch them; the crawler
// does neither, and only the leaser writes.
func TestPoolDemandPermissions(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, nil)
	key := events.DemandKey("web", "m1")
	rec, _ := json.Marshal(events.PoolDemand{V: 1, Leaser: "m1", Pool: "web", WindowSeconds: 30, Refused: 2, At: time.Now().UTC()})
	leaser := ts.connect(t, "leaser")
	leaser.mustAllow(t, "bind the buckets and write a demand record with a TTL", func(ctx context.Context) error {
		st, err := kvstore.Bind(ctx, leaser.js)
		if err != nil {
			return err
		}
		_, err = kvstore.PutTTL(ctx, leaser.js, st.PoolDemand, key, rec, 0, time.Minute)
		return err
	})
	for _, user := range []string{"reconciler", "viewer"} {
		c := ts.connect(t, user)
		c.mustAllow(t, "read and watch pool_demand", func(ctx context.Context) error {
			kv, err := c.js.KeyValue(ctx, events.BucketPoolDemand)
			if err != nil {
				return err
			}
			m, err := kvstore.Latest(ctx, kv)
			if err != nil {
				return err
			}
			if d := fleet.SumDemand(m)["web"]; d.Refused != 2 {
				return fmt.Errorf("demand %+v", d)
			}
			return nil
		})
		c.mustDeny(t, "write pool_demand", "$KV.pool_demand."+key, kvPut(c, events.BucketPoolDemand, key))
	}
	crawler := ts.connect(t, "crawler")
	crawler.mustDeny(t, "read pool_demand", "$JS.API.DIRECT.GET.KV_pool_demand.", func(ctx context.Context) error {
		_, err := crawler.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_pool_demand.$KV.pool_demand."+key, nil)
		return err
	})
	crawler.mustDeny(t, "write pool_demand", "$KV.pool_demand."+key, kvPut(crawler, events.BucketPoolDemand, key))
}
