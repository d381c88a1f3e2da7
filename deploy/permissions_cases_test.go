package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

func permNoUserNoAccess(t *testing.T, r *permRig) {
	nc, err := nats.Connect(r.ts.srv.ClientURL(), nats.RootCAs(r.ts.caFile), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected: the config must require a user")
	}
	nc, err = nats.Connect(r.ts.srv.ClientURL(), nats.RootCAs(r.ts.caFile), nats.UserInfo("admin", "wrong"), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("admin connected with a wrong password")
	}
}

func permAdminWritesProxiesAndCloudInit(t *testing.T, r *permRig) {
	r.admin.mustAllow(t, "write proxies", func(ctx context.Context) error {
		_, err := r.store.Proxies.Put(ctx, "crawl-1", []byte(`{"v":1,"provider":"local"}`))
		return err
	})
	r.admin.mustAllow(t, "write cloud_init", func(ctx context.Context) error {
		_, err := r.store.CloudInit.Put(ctx, "squid", []byte("#cloud-config\n"))
		return err
	})
}

func permCrawlerLeasesThroughTheLeaseService(t *testing.T, r *permRig) {
	leaser := r.ts.connect(t, "leaser")
	svc, err := micro.AddService(leaser.nc, micro.Config{Name: events.LeaseService, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	g := svc.AddGroup(events.LeaseSubjectPrefix)
	for _, name := range []string{"acquire", "renew", "release", "report"} {
		if err := g.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			if name != "acquire" {
				_ = req.RespondJSON(map[string]string{"endpoint": name, "user": "leaser"})
				return
			}
			// A waiting acquire is answered later, from another goroutine: allow_responses
			// must let that answer through (docs/leases.md#waiting).
			go func() {
				time.Sleep(1500 * time.Millisecond)
				_ = req.RespondJSON(map[string]string{"endpoint": name, "user": "leaser"})
			}()
		})); err != nil {
			t.Fatal(err)
		}
	}
	if err := leaser.nc.FlushTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	crawler := r.ts.connect(t, "crawler")
	for _, subj := range []string{events.LeaseAcquireSubject, events.LeaseRenewSubject, events.LeaseReleaseSubject, events.LeaseReportSubject} {
		crawler.mustAllow(t, "request "+subj, func(ctx context.Context) error {
			m, err := crawler.nc.RequestWithContext(ctx, subj, []byte(`{"selector":{"geo":"de"}}`))
			if err != nil {
				return err
			}
			if want := strings.TrimPrefix(subj, events.LeaseSubjectPrefix+"."); !strings.Contains(string(m.Data), want) {
				return fmt.Errorf("reply %s is not from the %s endpoint", m.Data, want)
			}
			return nil
		})
	}
	if v := leaser.allViolations(); len(v) > 0 {
		t.Fatalf("the leaser was denied while serving: %q", v)
	}
}

func permCrawlerCannotWriteProxies(t *testing.T, r *permRig) {
	crawler := r.ts.connect(t, "crawler")
	crawler.mustDeny(t, "write a proxy spec", "$KV.proxies.evil", kvPut(crawler, "proxies", "evil"))
	crawler.mustDeny(t, "bind the proxies bucket", "$JS.API.STREAM.INFO.KV_proxies", func(ctx context.Context) error {
		_, err := crawler.js.KeyValue(ctx, events.BucketProxies)
		return err
	})
	crawler.mustDeny(t, "read a proxy spec", "$JS.API.DIRECT.GET.KV_proxies.", func(ctx context.Context) error {
		_, err := crawler.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_proxies.$KV.proxies.crawl-1", nil)
		return err
	})
	r.keyAbsent(t, r.store.Proxies, "evil", "a crawler's write")
}

func permCrawlerCannotPullOps(t *testing.T, r *permRig) {
	crawler := r.ts.connect(t, "crawler")
	crawler.mustDeny(t, "bind OPS_local's host consumer", "$JS.API.CONSUMER.INFO.OPS_local.host_local", func(ctx context.Context) error {
		_, err := crawler.js.Consumer(ctx, events.OpsStream("local"), events.HostConsumer("local"))
		return err
	})
	crawler.mustDeny(t, "pull an op of local", "$JS.API.CONSUMER.MSG.NEXT.OPS_local.host_local", pullNext(crawler, "local", "local"))
	crawler.mustDeny(t, "listen for ops", "egress.ops.>", subscribe(crawler, "egress.ops.>"))
	if pending, ack := r.queue(t, "local", "local"); pending != 1 || ack != 0 {
		t.Fatalf("after the crawler's attempts the op of local should still wait: pending %d, ack pending %d", pending, ack)
	}
}

func permCrawlerCannotImpersonateTheLeaserOr(t *testing.T, r *permRig) {
	crawler := r.ts.connect(t, "crawler")
	crawler.mustDeny(t, "serve lease requests", events.LeaseAcquireSubject, subscribe(crawler, events.LeaseAcquireSubject))
	crawler.mustDeny(t, "listen on the default inbox", "_INBOX.>", subscribe(crawler, "_INBOX.>"))
	crawler.mustDeny(t, "listen on the leaser's inbox", "_INBOX_leaser.>", subscribe(crawler, "_INBOX_leaser.>"))
	crawler.mustDeny(t, "publish an event", "egress.events.lease.x", func(ctx context.Context) error {
		_, err := crawler.js.Publish(ctx, "egress.events.lease.x", []byte(`{}`))
		return err
	})
}

func permProvisionerOfLocalPullsAndAcks(t *testing.T, r *permRig) {
	prov := r.ts.connect(t, "provisioner-local")
	var msg jetstream.Msg
	prov.mustAllow(t, "pull an op from OPS_local", func(ctx context.Context) error {
		cons, err := prov.js.Consumer(ctx, events.OpsStream("local"), events.HostConsumer("local"))
		if err != nil {
			return err
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			msg = m
		}
		if msg == nil {
			return fmt.Errorf("no op delivered (batch error: %v)", batch.Error())
		}
		return nil
	})
	if !strings.HasPrefix(msg.Subject(), "egress.ops.local.local.") {
		t.Fatalf("pulled %q from OPS_local", msg.Subject())
	}
	prov.mustAllow(t, "heartbeat and ack the op", func(ctx context.Context) error {
		if err := msg.InProgress(); err != nil {
			return err
		}
		return msg.DoubleAck(ctx)
	})
	if pending, ack := r.queue(t, "local", "local"); pending != 0 || ack != 0 {
		t.Fatalf("after the ack OPS_local/host_local should be empty: pending %d, ack pending %d", pending, ack)
	}
}

// permRig is what every case of TestPermissions shares: one server with the deployed config,
// admin's connection, the declared store, and one op waiting for each provider.
type permRig struct {
	ts    *testServer
	admin *client
	store *kvstore.Store
	ctx   context.Context
}

func newPermRig(t *testing.T) *permRig {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	store := declare(t, admin, map[string][]kvstore.HostConfig{
		"local":    {{Name: "local", MaxConcurrentOps: 2}},
		"kvm-home": {{Name: "kvm1", MaxConcurrentOps: 2}},
	})
	r := &permRig{ts: ts, admin: admin, store: store, ctx: context.Background()}
	r.publishOp(t, "local", "local", "p-local")
	r.publishOp(t, "kvm-home", "kvm1", "p-kvm")
	return r
}

// publishOp publishes, as admin, a get op for proxy on provider's host.
func (r *permRig) publishOp(t *testing.T, provider, host, proxy string) {
	t.Helper()
	op := events.Op{V: 1, ID: "op-" + proxy, Kind: events.OpGet, Proxy: proxy, Provider: provider, Host: host,
		UID: "uid-" + proxy, InstanceName: "i-" + proxy, IssuedAt: time.Now().UTC()}
	b, _ := json.Marshal(op)
	if _, err := r.admin.js.Publish(r.ctx, events.OpSubject(provider, host, proxy), b, jetstream.WithMsgID(op.MsgID())); err != nil {
		t.Fatalf("admin publishes an op: %v", err)
	}
}

// queue reports what is left of a host consumer's queue, as admin sees it.
func (r *permRig) queue(t *testing.T, provider, host string) (pending, ackPending int) {
	t.Helper()
	cons, err := r.admin.js.Consumer(r.ctx, events.OpsStream(provider), events.HostConsumer(host))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.NumPending), info.NumAckPending
}

func (r *permRig) keyAbsent(t *testing.T, kv jetstream.KeyValue, key, why string) {
	t.Helper()
	if e, err := kv.Get(r.ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("%s: %s/%s should not exist, got %v, %v", why, kv.Bucket(), key, e, err)
	}
}

func pullNext(c *client, provider, host string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT."+events.OpsStream(provider)+"."+events.HostConsumer(host),
			[]byte(`{"batch":1,"expires":500000000}`))
		return err
	}
}

func kvPut(c *client, bucket, key string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.js.Publish(ctx, "$KV."+bucket+"."+key, []byte(`{"v":1}`))
		return err
	}
}

func subscribe(c *client, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		sub, err := c.nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		// A denied subscription is never delivered to; wait for the violation or a message.
		_, err = sub.NextMsgWithContext(ctx)
		return err
	}
}
