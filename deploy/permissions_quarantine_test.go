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

// address_quarantine: the pool controller (the reconciler's user) writes burned addresses
// with a TTL; the provisioners read the bucket whole for each create and the viewer shows
// it; neither writes, and the crawler does neither.
func TestQuarantinePermissions(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, nil)
	now := time.Now().UTC()
	q := events.Quarantine{V: 1, Address: "203.0.113.10", Prefix: "203.0.113.10/32", Pool: "web", Proxy: "web-a1b2c",
		Reason: events.ReasonBurned, At: now, Until: now.Add(time.Hour)}
	rec, _ := json.Marshal(q)
	key := events.QuarantineKey(q.Address)
	rc := ts.connect(t, "reconciler")
	rc.mustAllow(t, "write a quarantine record with a TTL", func(ctx context.Context) error {
		st, err := kvstore.Bind(ctx, rc.js)
		if err != nil {
			return err
		}
		_, err = kvstore.PutTTL(ctx, rc.js, st.Quarantine, key, rec, 0, time.Hour)
		return err
	})
	for _, user := range []string{"reconciler", "provisioner-local", "viewer"} {
		c := ts.connect(t, user)
		c.mustAllow(t, "read address_quarantine whole", func(ctx context.Context) error {
			kv, err := c.js.KeyValue(ctx, events.BucketQuarantine)
			if err != nil {
				return err
			}
			rows, err := fleet.Quarantine(ctx, kv, now)
			if err != nil {
				return err
			}
			if len(rows) != 1 || rows[0].Address != q.Address {
				return fmt.Errorf("quarantine %+v", rows)
			}
			return nil
		})
		if user != "reconciler" {
			c.mustDeny(t, "write address_quarantine", "$KV.address_quarantine."+key, kvPut(c, events.BucketQuarantine, key))
		}
	}
	crawler := ts.connect(t, "crawler")
	crawler.mustDeny(t, "read address_quarantine", "$JS.API.DIRECT.GET.KV_address_quarantine.", func(ctx context.Context) error {
		_, err := crawler.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_address_quarantine.$KV.address_quarantine."+key, nil)
		return err
	})
	crawler.mustDeny(t, "write address_quarantine", "$KV.address_quarantine."+key, kvPut(crawler, events.BucketQuarantine, key))
}
