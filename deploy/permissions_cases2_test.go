package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

func permProvisionerOfLocalCannotPullKvm(t *testing.T, r *permRig) {
	prov := r.ts.connect(t, "provisioner-local")
	prov.mustDeny(t, "bind OPS_kvm-home's host consumer", "$JS.API.CONSUMER.INFO.OPS_kvm-home.host_kvm1", func(ctx context.Context) error {
		_, err := prov.js.Consumer(ctx, events.OpsStream("kvm-home"), events.HostConsumer("kvm1"))
		return err
	})
	prov.mustDeny(t, "pull an op of kvm-home", "$JS.API.CONSUMER.MSG.NEXT.OPS_kvm-home.host_kvm1", pullNext(prov, "kvm-home", "kvm1"))
	prov.mustDeny(t, "create a consumer on OPS_kvm-home", "$JS.API.CONSUMER.CREATE.OPS_kvm-home.", func(ctx context.Context) error {
		_, err := prov.js.CreateOrUpdateConsumer(ctx, events.OpsStream("kvm-home"), jetstream.ConsumerConfig{Durable: "steal", AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	if pending, ack := r.queue(t, "kvm-home", "kvm1"); pending != 1 || ack != 0 {
		t.Fatalf("the op of kvm-home should still wait: pending %d, ack pending %d", pending, ack)
	}
}

func permProvisionerWritesItsOwnKeysOnly(t *testing.T, r *permRig) {
	ctx := r.ctx
	prov := r.ts.connect(t, "provisioner-local")
	var ps *kvstore.Store
	prov.mustAllow(t, "bind every bucket", func(ctx context.Context) (err error) {
		ps, err = bindStore(ctx, prov.js)
		return err
	})
	prov.mustAllow(t, "read a spec and user-data", func(ctx context.Context) error {
		if _, err := ps.Proxies.Get(ctx, "crawl-1"); err != nil {
			return err
		}
		_, err := ps.CloudInit.Get(ctx, "squid")
		return err
	})
	prov.mustAllow(t, "write its catalog, a target's health and an op lock", func(ctx context.Context) error {
		if _, err := ps.Catalog.Put(ctx, "local", []byte(`{"v":1}`)); err != nil {
			return err
		}
		if _, err := ps.Providers.Put(ctx, "local.local", []byte(`{"v":1}`)); err != nil {
			return err
		}
		lock, err := kvstore.AcquireLock(ctx, ps.JS, ps.Locks, events.OpLockKey("crawl-1"), "w1", "create", 5*time.Second)
		if err != nil {
			return err
		}
		if err := lock.Renew(ctx); err != nil {
			return err
		}
		return lock.Release(ctx)
	})
	prov.mustAllow(t, "read the last op result of a proxy (its attempt count)", func(ctx context.Context) error {
		s, err := prov.js.Stream(ctx, events.StreamEvents)
		if err != nil {
			return err
		}
		_, err = s.GetLastMsgForSubject(ctx, events.EventSubject(events.KindOpResult, "crawl-1"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // none yet: the read itself was allowed
		}
		return err
	})
	prov.mustAllow(t, "watch the lease revocations (lease_state revoked.>)", func(ctx context.Context) error {
		w, err := ps.LeaseState.Watch(ctx, events.RevokedPrefix+">")
		if err != nil {
			return err
		}
		defer w.Stop()
		select {
		case <-w.Updates(): // the end of the initial values, or a revocation
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	prov.mustDeny(t, "watch the holder slots", "$JS.API.CONSUMER.CREATE.KV_lease_state.", func(ctx context.Context) error {
		w, err := ps.LeaseState.Watch(ctx, "holder.>")
		if err != nil {
			return err
		}
		defer w.Stop()
		select {
		case <-w.Updates():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	prov.mustDeny(t, "write a revocation", "$KV.lease_state.revoked.crawl-1.0.aa", kvPut(prov, "lease_state", "revoked.crawl-1.0.aa"))
	prov.mustDeny(t, "write a proxy spec", "$KV.proxies.crawl-1", kvPut(prov, "proxies", "crawl-1"))
	prov.mustDeny(t, "write user-data", "$KV.cloud_init.squid", kvPut(prov, "cloud_init", "squid"))
	prov.mustDeny(t, "write a status", "$KV.proxy_status.crawl-1", kvPut(prov, "proxy_status", "crawl-1"))
	prov.mustDeny(t, "write kvm-home's catalog", "$KV.provider_catalog.kvm-home", kvPut(prov, "provider_catalog", "kvm-home"))
	prov.mustDeny(t, "take the reconciler's leader lease", "$KV.egress_locks.leader.reconciler", kvPut(prov, "egress_locks", "leader.reconciler"))
	prov.mustDeny(t, "declare a stream", "$JS.API.STREAM.CREATE.", func(ctx context.Context) error {
		_, err := prov.js.CreateStream(ctx, jetstream.StreamConfig{Name: "STEAL", Subjects: []string{"egress.lease.>"}})
		return err
	})
	if e, err := r.store.Proxies.Get(ctx, "crawl-1"); err != nil || string(e.Value()) != `{"v":1,"provider":"local"}` {
		t.Fatalf("the provisioner's write must not have reached proxies: %v %v", e, err)
	}
}

func permEveryLeaseShardTheLeaserWrites(t *testing.T, r *permRig) {
	leaser, viewer, reconciler, crawler := r.ts.connect(t, "leaser"), r.ts.connect(t, "viewer"), r.ts.connect(t, "reconciler"), r.ts.connect(t, "crawler")
	var shards kvstore.LeaseShards
	leaser.mustAllow(t, "bind every lease shard", func(ctx context.Context) (err error) {
		shards, err = kvstore.OpenLeaseShards(ctx, leaser.js)
		return err
	})
	if shards.Len() != kvstore.MaxLeaseShards {
		t.Fatalf("%d shards bound, want %d", shards.Len(), kvstore.MaxLeaseShards)
	}
	for i, kv := range shards.All() {
		key := fmt.Sprintf("shard-%d.0", i)
		leaser.mustAllow(t, "create, read and delete a slot in "+kv.Bucket(), func(ctx context.Context) error {
			rev, err := kvstore.CreateTTL(ctx, kv, key, []byte(`{"v":1}`), time.Minute)
			if err != nil {
				return err
			}
			if _, _, err := kvstore.Get(ctx, kv, key); err != nil {
				return err
			}
			// The batched read of a shard whose watch stands still (decision 100).
			if es, err := kvstore.LastEntries(ctx, leaser.js, kv, []string{fmt.Sprintf("shard-%d.*", i)}); err != nil || len(es) != 1 {
				return fmt.Errorf("the batched read: %d entries, %w", len(es), err)
			}
			return kvstore.DeleteNoted(ctx, leaser.js, kv, key, rev, []byte(`{"v":1}`))
		})
		crawler.mustDeny(t, "write "+kv.Bucket(), "$KV."+kv.Bucket()+"."+key, kvPut(crawler, kv.Bucket(), key))
	}
	for _, c := range []*client{viewer, reconciler} {
		c.mustAllow(t, "read every lease shard", func(ctx context.Context) error {
			s, err := kvstore.OpenLeaseShards(ctx, c.js)
			if err != nil {
				return err
			}
			for _, kv := range s.All() {
				if _, err := kvstore.Latest(ctx, kv); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func permTheLeaseMasterProvisionerProberAnd(t *testing.T, r *permRig) {
	const subject = "$JS.API.DIRECT.GET.KV_egress_locks.$KV.egress_locks." + events.KeyLeaseMaster
	for _, user := range []string{"provisioner-local", "prober", "leaser"} {
		c := r.ts.connect(t, user)
		c.mustAllow(t, "read the lease master", func(ctx context.Context) error {
			locks, err := c.js.KeyValue(ctx, events.BucketLocks)
			if err != nil {
				return err
			}
			_, _, err = kvstore.Get(ctx, locks, events.KeyLeaseMaster)
			return err
		})
		c.mustDeny(t, "overwrite the lease master", "$KV.egress_locks."+events.KeyLeaseMaster, kvPut(c, events.BucketLocks, events.KeyLeaseMaster))
	}
	for _, user := range []string{"viewer", "crawler", "reconciler"} {
		c := r.ts.connect(t, user)
		c.mustDeny(t, "read the lease master", subject, func(ctx context.Context) error {
			_, err := c.nc.RequestWithContext(ctx, subject, nil)
			return err
		})
	}
}

// The lease keys reports (decision 88): a provisioner writes its own provider's and no other's;
// a viewer reads them (master IDs only) and still not the master.
func permLeaseKeysReports(t *testing.T, r *permRig) {
	prov, viewer := r.ts.connect(t, "provisioner-local"), r.ts.connect(t, "viewer")
	prov.mustAllow(t, "report its proxies' lease keys", func(ctx context.Context) error {
		locks, err := prov.js.KeyValue(ctx, events.BucketLocks)
		if err != nil {
			return err
		}
		_, err = kvstore.PutJSON(ctx, locks, events.LeaseKeysKey("local"), events.LeaseKeysReport{V: 1, Provider: "local"})
		return err
	})
	prov.mustDeny(t, "report another provider's lease keys", "$KV.egress_locks."+events.LeaseKeysKey("kvm-home"),
		kvPut(prov, events.BucketLocks, events.LeaseKeysKey("kvm-home")))
	viewer.mustAllow(t, "read a provider's lease keys", func(ctx context.Context) error {
		locks, err := viewer.js.KeyValue(ctx, events.BucketLocks)
		if err != nil {
			return err
		}
		_, _, err = kvstore.Get(ctx, locks, events.LeaseKeysKey("local"))
		return err
	})
}

func permTheLeaserKeepsHolderSlotsAnd(t *testing.T, r *permRig) {
	leaser, crawler := r.ts.connect(t, "leaser"), r.ts.connect(t, "crawler")
	leaser.mustAllow(t, "create, read, watch and delete a holder slot and a session", func(ctx context.Context) error {
		st, err := kvstore.Bind(ctx, leaser.js)
		if err != nil {
			return err
		}
		for _, key := range []string{"holder._.Yw.0", "session.czQy"} {
			rev, err := kvstore.CreateTTL(ctx, st.LeaseState, key, []byte(`{"v":1}`), time.Minute)
			if err != nil {
				return err
			}
			if _, _, err := kvstore.Get(ctx, st.LeaseState, key); err != nil {
				return err
			}
			if _, err := kvstore.PutTTL(ctx, leaser.js, st.LeaseState, key, []byte(`{"v":1}`), rev, time.Minute); err != nil {
				return err
			}
			if err := st.LeaseState.Delete(ctx, key); err != nil {
				return err
			}
		}
		for _, kv := range []jetstream.KeyValue{st.LeaseState, st.Pools} {
			if _, err := kvstore.Latest(ctx, kv); err != nil {
				return err
			}
		}
		return nil
	})
	crawler.mustDeny(t, "write lease_state", "$KV.lease_state.session.czQy", kvPut(crawler, "lease_state", "session.czQy"))

	// The viewer reads the waiting acquires (egressd status leases), and nothing else there.
	if _, err := r.store.LeaseState.Put(r.ctx, "wait.0a", []byte(`{"v":1,"replica":"r1","holder":"h"}`)); err != nil {
		t.Fatal(err)
	}
	viewer := r.ts.connect(t, "viewer")
	viewer.mustAllow(t, "read the waiting acquires", func(ctx context.Context) error {
		kv, err := viewer.js.KeyValue(ctx, events.BucketLeaseState)
		if err != nil {
			return err
		}
		w, err := fleet.LoadWaiters(ctx, kv, time.Now())
		if err == nil && len(w.Rows) != 1 {
			err = fmt.Errorf("%d waiters read, want 1", len(w.Rows))
		}
		return err
	})
	viewer.mustDeny(t, "read the holder slots and sessions", "$JS.API.CONSUMER.CREATE.KV_lease_state.", func(ctx context.Context) error {
		kv, err := viewer.js.KeyValue(ctx, events.BucketLeaseState)
		if err != nil {
			return err
		}
		_, err = kvstore.Latest(ctx, kv)
		return err
	})
}

func permViewerReadsProxyStatusButCannot(t *testing.T, r *permRig) {
	ctx := r.ctx
	if _, err := r.store.Status.Put(ctx, "crawl-1", []byte(`{"v":1,"phase":"Ready"}`)); err != nil {
		t.Fatal(err)
	}
	// 1.5 MB of statuses: past 1 MB in flight the server asks a watcher for flow control,
	// which the watcher must be allowed to answer ($JS.FC.KV_proxy_status.>).
	big := []byte(`{"v":1,"message":"` + strings.Repeat("x", 128<<10) + `"}`)
	for i := range 12 {
		if _, err := r.store.Status.Put(ctx, fmt.Sprintf("bulk-%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	viewer := r.ts.connect(t, "viewer")
	var status jetstream.KeyValue
	viewer.mustAllow(t, "read and watch all of proxy_status", func(ctx context.Context) (err error) {
		if status, err = viewer.js.KeyValue(ctx, events.BucketStatus); err != nil {
			return err
		}
		e, err := status.Get(ctx, "crawl-1")
		if err != nil {
			return err
		}
		if !strings.Contains(string(e.Value()), "Ready") {
			return fmt.Errorf("read %s", e.Value())
		}
		w, err := status.WatchAll(ctx)
		if err != nil {
			return err
		}
		defer w.Stop()
		n := 0
		for e := range w.Updates() {
			if e == nil {
				if n != 13 {
					return fmt.Errorf("the watch delivered %d statuses, want 13", n)
				}
				return nil
			}
			n++
		}
		return errors.New("watch closed")
	})
	viewer.mustDeny(t, "write a status", "$KV.proxy_status.crawl-1", func(ctx context.Context) error {
		_, err := status.Put(ctx, "crawl-1", []byte(`{"v":1,"phase":"Failed"}`))
		return err
	})
	// Specs hold proxy passwords and user-data. Binding the bucket (stream info, for
	// `nats stream report`) is allowed; reading or watching its values is not.
	var proxies jetstream.KeyValue
	viewer.mustAllow(t, "bind proxies", func(ctx context.Context) (err error) {
		proxies, err = viewer.js.KeyValue(ctx, events.BucketProxies)
		return err
	})
	viewer.mustDeny(t, "read a proxy spec", "$JS.API.DIRECT.GET.KV_proxies.", func(ctx context.Context) error {
		_, err := proxies.Get(ctx, "crawl-1")
		return err
	})
	viewer.mustDeny(t, "watch proxy specs", "$JS.API.CONSUMER.CREATE.KV_proxies.", func(ctx context.Context) error {
		_, err := proxies.WatchAll(ctx)
		return err
	})
	// A pool's template holds the members' password too; its ledger holds none.
	viewer.mustDeny(t, "read a pool spec", "$JS.API.DIRECT.GET.KV_pools.", func(ctx context.Context) error {
		_, err := viewer.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_pools.$KV.pools.web", nil)
		return err
	})
	viewer.mustAllow(t, "read and watch pool_status", func(ctx context.Context) error {
		kv, err := viewer.js.KeyValue(ctx, events.BucketPoolStatus)
		if err != nil {
			return err
		}
		_, err = kvstore.Latest(ctx, kv)
		return err
	})
	viewer.mustDeny(t, "write a pool's ledger", "$KV.pool_status.web", kvPut(viewer, "pool_status", "web"))
	viewer.mustDeny(t, "read user-data", "$JS.API.DIRECT.GET.KV_cloud_init.", func(ctx context.Context) error {
		_, err := viewer.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_cloud_init.$KV.cloud_init.squid", nil)
		return err
	})
	if e, err := r.store.Status.Get(ctx, "crawl-1"); err != nil || !strings.Contains(string(e.Value()), "Ready") {
		t.Fatalf("the viewer's write must not have reached proxy_status: %v %v", e, err)
	}
}

func permViewerFollowsEventsButNotThe(t *testing.T, r *permRig) {
	ctx := r.ctx
	if _, err := r.admin.js.Publish(ctx, events.EventSubject(events.KindPhase, "crawl-1"), []byte(`{"v":1,"kind":"phase"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admin.js.Publish(ctx, events.EventSubject(events.KindLease, "crawl-1"), []byte(`{"v":1,"kind":"lease"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admin.js.CreateOrUpdateConsumer(ctx, events.StreamEvents, jetstream.ConsumerConfig{Durable: "reconciler",
		FilterSubject: events.OpResultSubjects, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	viewer := r.ts.connect(t, "viewer")
	viewer.mustAllow(t, "read the event history", func(ctx context.Context) error {
		cons, err := viewer.js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(m.Subject(), "egress.events.") {
			return fmt.Errorf("got %s", m.Subject())
		}
		return nil
	})
	viewer.mustAllow(t, "read the lease event history", func(ctx context.Context) error {
		cons, err := viewer.js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(m.Subject(), "egress.events.lease.") {
			return fmt.Errorf("got %s", m.Subject())
		}
		return nil
	})
	viewer.mustDeny(t, "pull from the reconciler's durable", "$JS.API.CONSUMER.MSG.NEXT.EGRESS_EVENTS.reconciler", func(ctx context.Context) error {
		_, err := viewer.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.EGRESS_EVENTS.reconciler", []byte(`{"batch":1,"expires":500000000}`))
		return err
	})
	viewer.mustDeny(t, "redefine the reconciler's durable", "$JS.API.CONSUMER.CREATE.EGRESS_EVENTS.reconciler", func(ctx context.Context) error {
		_, err := viewer.js.CreateOrUpdateConsumer(ctx, events.StreamEvents, jetstream.ConsumerConfig{Durable: "reconciler",
			FilterSubject: events.OpResultSubjects, AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
}
