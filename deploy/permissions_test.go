// Package deploy_test proves the deployment files in deploy/: the nats-server config grants
// each role what it needs and nothing that lets it touch what is not its own
// (permissions_test.go, roles_test.go), and the Grafana dashboard only queries metrics egressd
// exports (dashboard_test.go).
package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/internal/testcert"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// nodeConfig is what a cluster node runs; it includes nats-server.conf, which holds the users.
const nodeConfig = "nats/node-1.conf"

// The test's passwords, one per user of the config. The servers' environment may hold a
// bcrypt hash instead of the password (as production should); admin's does, to prove that
// a hash passes through the environment variable intact.
var passwords = map[string]string{
	"sys":                  "sys-test-password",
	"admin":                "admin-test-password",
	"reconciler":           "reconciler-test-password",
	"provisioner-local":    "provisioner-local-test-password",
	"provisioner-kvm-home": "provisioner-kvm-home-test-password",
	"prober":               "prober-test-password",
	"leaser":               "leaser-test-password",
	"crawler":              "crawler-test-password",
	"viewer":               "viewer-test-password",
}

// adminPasswordBcrypt is bcrypt("admin-test-password") as `nats server passwd` makes it, but
// at cost 4 instead of 10: at cost 10 the server's check of every admin login took over the
// client's 2 s connect timeout under -race on a loaded machine ("expected 'PONG', got 'PING'").
const adminPasswordBcrypt = "$2a$04$d/0NRm33LBHzm3nSnVdc8uRMtoTEMZQmnvtCUaAEwpmds8MIj7QX6"

// passwordEnv is the variable the config reads a user's password from.
func passwordEnv(user string) string {
	return "EGRESSD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// testServer is the deployed config running as a single node.
type testServer struct {
	srv    *server.Server
	caFile string
	log    *violationLog
}

// startServer loads the cluster config exactly as a node would (secrets and TLS files from
// the environment), turns it into a single node on a random loopback port with its store in
// a temporary directory, and starts it.
func startServer(t *testing.T) *testServer {
	t.Helper()
	certFile, keyFile, caFile := writeTLS(t)
	t.Setenv("EGRESSD_NATS_TLS_CERT", certFile)
	t.Setenv("EGRESSD_NATS_TLS_KEY", keyFile)
	t.Setenv("EGRESSD_NATS_TLS_CA", caFile)
	for user, pw := range passwords {
		t.Setenv(passwordEnv(user), pw)
	}
	t.Setenv(passwordEnv("admin"), adminPasswordBcrypt)

	opts, err := server.ProcessConfigFile(nodeConfig)
	if err != nil {
		t.Fatalf("load %s: %v", nodeConfig, err)
	}
	if !opts.JetStream || opts.SystemAccount != "SYS" || opts.Cluster.Name != "egressd" || len(opts.Routes) != 3 {
		t.Fatalf("%s: want JetStream, system account SYS and a three-route cluster \"egressd\"; got jetstream=%v system=%q cluster=%q routes=%d",
			nodeConfig, opts.JetStream, opts.SystemAccount, opts.Cluster.Name, len(opts.Routes))
	}
	if opts.TLSConfig == nil || opts.Cluster.TLSConfig == nil {
		t.Fatalf("%s: clients and routes must both use TLS", nodeConfig)
	}
	// One node: no cluster, no routes, no fixed ports, a throwaway store.
	opts.Cluster = server.ClusterOpts{}
	opts.Routes, opts.RoutesStr = nil, ""
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.JetStreamMaxStore = 1 << 30
	opts.NoSigs = true

	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	log := &violationLog{}
	s.SetLoggerV2(log, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &testServer{srv: s, caFile: caFile, log: log}
}

// violationLog keeps the server's permission-violation log lines.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *violationLog) Errorf(format string, v ...any) {
	if line := fmt.Sprintf(format, v...); strings.Contains(line, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
}
func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}

func (l *violationLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// client is one user's connection. The server answers a denied publish or subscription with
// an asynchronous "Permissions Violation" error naming the subject, which client records, so
// a test can tell a denial from any other reason for a timeout.
type client struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream

	mu         sync.Mutex
	violations []string
	changed    chan struct{} // closed and replaced on every new violation
}

// connect logs in as user over TLS, with the user's own inbox prefix as the config requires.
func (ts *testServer) connect(t *testing.T, user string) *client {
	t.Helper()
	c := &client{user: user, changed: make(chan struct{})}
	nc, err := nats.Connect(ts.srv.ClientURL(),
		nats.Name("deploy test "+user),
		nats.UserInfo(user, passwords[user]),
		nats.CustomInboxPrefix("_INBOX_"+user),
		nats.RootCAs(ts.caFile),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.mu.Lock()
				c.violations = append(c.violations, err.Error())
				close(c.changed)
				c.changed = make(chan struct{})
				c.mu.Unlock()
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.nc, c.js = nc, js
	return c
}

// violation returns the first recorded violation for a subject starting with prefix, and a
// channel that is closed when a new violation arrives.
func (c *client) violation(prefix string) (string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.violations {
		if strings.Contains(v, ` to "`+prefix) {
			return v, nil
		}
	}
	return "", c.changed
}

func (c *client) allViolations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// denyTimeout bounds a denied operation. A denial is seen within milliseconds (the server's
// error), so the operation is cut short then; the timeout only matters when the config fails
// to deny, and then the operation normally succeeds well before it.
const denyTimeout = 3 * time.Second

// mustDeny runs op as c and fails unless the server refused it with a permissions violation
// for a subject starting with subject, and op itself failed.
func (c *client) mustDeny(t *testing.T, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), denyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	var opErr error
	finished := false
	for {
		v, changed := c.violation(subject)
		if v != "" {
			cancel() // the denial is proven; stop waiting for an answer that cannot come
			break
		}
		select {
		case opErr = <-done:
			finished = true
			if opErr == nil {
				t.Fatalf("%s could %s: the config must deny %q to %s, but the operation succeeded", c.user, what, subject, c.user)
			}
			// Let a violation that is on its way arrive.
			select {
			case <-changed:
				continue
			case <-time.After(500 * time.Millisecond):
			}
			if v, _ := c.violation(subject); v == "" {
				t.Fatalf("%s could not %s, but not because of a permission: want a violation for %q, got %v (violations: %q)",
					c.user, what, subject, opErr, c.allViolations())
			}
		case <-changed:
			continue
		}
		break
	}
	if !finished {
		opErr = <-done
	}
	if opErr == nil {
		t.Fatalf("%s: %s was denied %q and yet the operation reported success", c.user, what, subject)
	}
}

// mustAllow fails unless op succeeds without any new permission violation for c.
func (c *client) mustAllow(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	before := len(c.allViolations())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := op(ctx); err != nil {
		t.Fatalf("%s must be able to %s: %v (violations: %q)", c.user, what, err, c.allViolations()[before:])
	}
	if err := c.nc.FlushTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	if v := c.allViolations()[before:]; len(v) > 0 {
		t.Fatalf("%s must be able to %s, but the server denied: %q", c.user, what, v)
	}
}

// bindStore binds every bucket without declaring any: what every role but admin does.
func bindStore(ctx context.Context, js jetstream.JetStream) (*kvstore.Store, error) {
	return kvstore.Bind(ctx, js)
}

// declare is `egressd setup` as admin: every bucket (with kvstore.MaxLeaseShards lease shards), both event streams, the ops streams of the
// providers local (host "local") and kvm-home (host "kvm1") with their host consumers, and
// the installation ID.
func declare(t *testing.T, admin *client, hosts map[string][]kvstore.HostConfig) *kvstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every lease shard the config grants, so each role's rules for all of them are tried.
	store, err := kvstore.Ensure(ctx, admin.js, kvstore.Options{LeaseShards: kvstore.MaxLeaseShards})
	if err != nil {
		t.Fatalf("admin declares the buckets: %v", err)
	}
	for provider, hs := range hosts {
		if err := kvstore.EnsureOps(ctx, admin.js, provider, hs, kvstore.Options{}); err != nil {
			t.Fatalf("admin declares the ops of %s: %v", provider, err)
		}
	}
	if _, err := store.Locks.Create(ctx, events.KeyInstallation, []byte("inst-deploy-test")); err != nil {
		t.Fatalf("admin creates the installation id: %v", err)
	}
	if _, err := store.Locks.Create(ctx, events.KeyLeaseMaster, leaseauth.NewMaster().Encode()); err != nil {
		t.Fatalf("admin creates the lease master: %v", err)
	}
	return store
}

func TestPermissions(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	store := declare(t, admin, map[string][]kvstore.HostConfig{
		"local":    {{Name: "local", MaxConcurrentOps: 2}},
		"kvm-home": {{Name: "kvm1", MaxConcurrentOps: 2}},
	})
	ctx := context.Background()

	// One op waiting for each provider.
	publishOp := func(provider, host, proxy string) {
		op := events.Op{V: 1, ID: "op-" + proxy, Kind: events.OpGet, Proxy: proxy, Provider: provider, Host: host,
			UID: "uid-" + proxy, InstanceName: "i-" + proxy, IssuedAt: time.Now().UTC()}
		b, _ := json.Marshal(op)
		if _, err := admin.js.Publish(ctx, events.OpSubject(provider, host, proxy), b, jetstream.WithMsgID(op.MsgID())); err != nil {
			t.Fatalf("admin publishes an op: %v", err)
		}
	}
	publishOp("local", "local", "p-local")
	publishOp("kvm-home", "kvm1", "p-kvm")
	// queue reports what is left of a host consumer's queue, as admin sees it.
	queue := func(provider, host string) (pending, ackPending int) {
		t.Helper()
		cons, err := admin.js.Consumer(ctx, events.OpsStream(provider), events.HostConsumer(host))
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.NumPending), info.NumAckPending
	}
	keyAbsent := func(kv jetstream.KeyValue, key, why string) {
		t.Helper()
		if e, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s: %s/%s should not exist, got %v, %v", why, kv.Bucket(), key, e, err)
		}
	}
	pullNext := func(c *client, provider, host string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT."+events.OpsStream(provider)+"."+events.HostConsumer(host),
				[]byte(`{"batch":1,"expires":500000000}`))
			return err
		}
	}
	kvPut := func(c *client, bucket, key string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.js.Publish(ctx, "$KV."+bucket+"."+key, []byte(`{"v":1}`))
			return err
		}
	}
	subscribe := func(c *client, subject string) func(ctx context.Context) error {
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

	t.Run("no user, no access", func(t *testing.T) {
		nc, err := nats.Connect(ts.srv.ClientURL(), nats.RootCAs(ts.caFile), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatal("an anonymous client connected: the config must require a user")
		}
		nc, err = nats.Connect(ts.srv.ClientURL(), nats.RootCAs(ts.caFile), nats.UserInfo("admin", "wrong"), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatal("admin connected with a wrong password")
		}
	})

	t.Run("admin writes proxies and cloud_init", func(t *testing.T) {
		admin.mustAllow(t, "write proxies", func(ctx context.Context) error {
			_, err := store.Proxies.Put(ctx, "crawl-1", []byte(`{"v":1,"provider":"local"}`))
			return err
		})
		admin.mustAllow(t, "write cloud_init", func(ctx context.Context) error {
			_, err := store.CloudInit.Put(ctx, "squid", []byte("#cloud-config\n"))
			return err
		})
	})

	t.Run("crawler leases through the lease service", func(t *testing.T) {
		leaser := ts.connect(t, "leaser")
		svc, err := micro.AddService(leaser.nc, micro.Config{Name: events.LeaseService, Version: "1.0.0"})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Stop()
		g := svc.AddGroup(events.LeaseSubjectPrefix)
		for _, name := range []string{"acquire", "renew", "release", "report"} {
			if err := g.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
				_ = req.RespondJSON(map[string]string{"endpoint": name, "user": "leaser"})
			})); err != nil {
				t.Fatal(err)
			}
		}
		if err := leaser.nc.FlushTimeout(time.Second); err != nil {
			t.Fatal(err)
		}
		crawler := ts.connect(t, "crawler")
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
	})

	t.Run("crawler cannot write proxies", func(t *testing.T) {
		crawler := ts.connect(t, "crawler")
		crawler.mustDeny(t, "write a proxy spec", "$KV.proxies.evil", kvPut(crawler, "proxies", "evil"))
		crawler.mustDeny(t, "bind the proxies bucket", "$JS.API.STREAM.INFO.KV_proxies", func(ctx context.Context) error {
			_, err := crawler.js.KeyValue(ctx, events.BucketProxies)
			return err
		})
		crawler.mustDeny(t, "read a proxy spec", "$JS.API.DIRECT.GET.KV_proxies.", func(ctx context.Context) error {
			_, err := crawler.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_proxies.$KV.proxies.crawl-1", nil)
			return err
		})
		keyAbsent(store.Proxies, "evil", "a crawler's write")
	})

	t.Run("crawler cannot pull ops", func(t *testing.T) {
		crawler := ts.connect(t, "crawler")
		crawler.mustDeny(t, "bind OPS_local's host consumer", "$JS.API.CONSUMER.INFO.OPS_local.host_local", func(ctx context.Context) error {
			_, err := crawler.js.Consumer(ctx, events.OpsStream("local"), events.HostConsumer("local"))
			return err
		})
		crawler.mustDeny(t, "pull an op of local", "$JS.API.CONSUMER.MSG.NEXT.OPS_local.host_local", pullNext(crawler, "local", "local"))
		crawler.mustDeny(t, "listen for ops", "egress.ops.>", subscribe(crawler, "egress.ops.>"))
		if pending, ack := queue("local", "local"); pending != 1 || ack != 0 {
			t.Fatalf("after the crawler's attempts the op of local should still wait: pending %d, ack pending %d", pending, ack)
		}
	})

	t.Run("crawler cannot impersonate the leaser or overhear replies", func(t *testing.T) {
		crawler := ts.connect(t, "crawler")
		crawler.mustDeny(t, "serve lease requests", events.LeaseAcquireSubject, subscribe(crawler, events.LeaseAcquireSubject))
		crawler.mustDeny(t, "listen on the default inbox", "_INBOX.>", subscribe(crawler, "_INBOX.>"))
		crawler.mustDeny(t, "listen on the leaser's inbox", "_INBOX_leaser.>", subscribe(crawler, "_INBOX_leaser.>"))
		crawler.mustDeny(t, "publish an event", "egress.events.lease.x", func(ctx context.Context) error {
			_, err := crawler.js.Publish(ctx, "egress.events.lease.x", []byte(`{}`))
			return err
		})
	})

	t.Run("provisioner of local pulls and acks its ops", func(t *testing.T) {
		prov := ts.connect(t, "provisioner-local")
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
		if pending, ack := queue("local", "local"); pending != 0 || ack != 0 {
			t.Fatalf("after the ack OPS_local/host_local should be empty: pending %d, ack pending %d", pending, ack)
		}
	})

	t.Run("provisioner of local cannot pull kvm-home's ops", func(t *testing.T) {
		prov := ts.connect(t, "provisioner-local")
		prov.mustDeny(t, "bind OPS_kvm-home's host consumer", "$JS.API.CONSUMER.INFO.OPS_kvm-home.host_kvm1", func(ctx context.Context) error {
			_, err := prov.js.Consumer(ctx, events.OpsStream("kvm-home"), events.HostConsumer("kvm1"))
			return err
		})
		prov.mustDeny(t, "pull an op of kvm-home", "$JS.API.CONSUMER.MSG.NEXT.OPS_kvm-home.host_kvm1", pullNext(prov, "kvm-home", "kvm1"))
		prov.mustDeny(t, "create a consumer on OPS_kvm-home", "$JS.API.CONSUMER.CREATE.OPS_kvm-home.", func(ctx context.Context) error {
			_, err := prov.js.CreateOrUpdateConsumer(ctx, events.OpsStream("kvm-home"), jetstream.ConsumerConfig{Durable: "steal", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		})
		if pending, ack := queue("kvm-home", "kvm1"); pending != 1 || ack != 0 {
			t.Fatalf("the op of kvm-home should still wait: pending %d, ack pending %d", pending, ack)
		}
	})

	t.Run("provisioner writes its own keys only", func(t *testing.T) {
		prov := ts.connect(t, "provisioner-local")
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
		prov.mustDeny(t, "write a proxy spec", "$KV.proxies.crawl-1", kvPut(prov, "proxies", "crawl-1"))
		prov.mustDeny(t, "write user-data", "$KV.cloud_init.squid", kvPut(prov, "cloud_init", "squid"))
		prov.mustDeny(t, "write a status", "$KV.proxy_status.crawl-1", kvPut(prov, "proxy_status", "crawl-1"))
		prov.mustDeny(t, "write kvm-home's catalog", "$KV.provider_catalog.kvm-home", kvPut(prov, "provider_catalog", "kvm-home"))
		prov.mustDeny(t, "take the reconciler's leader lease", "$KV.egress_locks.leader.reconciler", kvPut(prov, "egress_locks", "leader.reconciler"))
		prov.mustDeny(t, "declare a stream", "$JS.API.STREAM.CREATE.", func(ctx context.Context) error {
			_, err := prov.js.CreateStream(ctx, jetstream.StreamConfig{Name: "STEAL", Subjects: []string{"egress.lease.>"}})
			return err
		})
		if e, err := store.Proxies.Get(ctx, "crawl-1"); err != nil || string(e.Value()) != `{"v":1,"provider":"local"}` {
			t.Fatalf("the provisioner's write must not have reached proxies: %v %v", e, err)
		}
	})

	t.Run("every lease shard: the leaser writes it, the viewer and the reconciler read it, the crawler neither", func(t *testing.T) {
		leaser, viewer, reconciler, crawler := ts.connect(t, "leaser"), ts.connect(t, "viewer"), ts.connect(t, "reconciler"), ts.connect(t, "crawler")
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
	})

	t.Run("the lease master: provisioner, prober and leaser read it, nobody but admin writes it, viewer, crawler and reconciler cannot read it", func(t *testing.T) {
		const subject = "$JS.API.DIRECT.GET.KV_egress_locks.$KV.egress_locks." + events.KeyLeaseMaster
		for _, user := range []string{"provisioner-local", "prober", "leaser"} {
			c := ts.connect(t, user)
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
			c := ts.connect(t, user)
			c.mustDeny(t, "read the lease master", subject, func(ctx context.Context) error {
				_, err := c.nc.RequestWithContext(ctx, subject, nil)
				return err
			})
		}
	})

	t.Run("the leaser keeps holder slots and sessions in lease_state and reads the pools, the crawler neither", func(t *testing.T) {
		leaser, crawler := ts.connect(t, "leaser"), ts.connect(t, "crawler")
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
	})

	t.Run("viewer reads proxy_status but cannot write it", func(t *testing.T) {
		if _, err := store.Status.Put(ctx, "crawl-1", []byte(`{"v":1,"phase":"Ready"}`)); err != nil {
			t.Fatal(err)
		}
		// 1.5 MB of statuses: past 1 MB in flight the server asks a watcher for flow control,
		// which the watcher must be allowed to answer ($JS.FC.KV_proxy_status.>).
		big := []byte(`{"v":1,"message":"` + strings.Repeat("x", 128<<10) + `"}`)
		for i := range 12 {
			if _, err := store.Status.Put(ctx, fmt.Sprintf("bulk-%d", i), big); err != nil {
				t.Fatal(err)
			}
		}
		viewer := ts.connect(t, "viewer")
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
		if e, err := store.Status.Get(ctx, "crawl-1"); err != nil || !strings.Contains(string(e.Value()), "Ready") {
			t.Fatalf("the viewer's write must not have reached proxy_status: %v %v", e, err)
		}
	})

	t.Run("viewer follows events but not the reconciler's consumer", func(t *testing.T) {
		if _, err := admin.js.Publish(ctx, events.EventSubject(events.KindPhase, "crawl-1"), []byte(`{"v":1,"kind":"phase"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.js.Publish(ctx, events.EventSubject(events.KindLease, "crawl-1"), []byte(`{"v":1,"kind":"lease"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.js.CreateOrUpdateConsumer(ctx, events.StreamEvents, jetstream.ConsumerConfig{Durable: "reconciler",
			FilterSubject: events.OpResultSubjects, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
		viewer := ts.connect(t, "viewer")
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
	})
}

// The pool controller (in the reconciler's process) follows report events on the lease
// stream, and the reconciler reads nothing else of it.
func TestReconcilerFollowsReportsOnTheLeaseStream(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, map[string][]kvstore.HostConfig{"local": {{Name: "local", MaxConcurrentOps: 2}}})
	ctx := context.Background()
	for _, k := range []events.EventKind{events.KindLease, events.KindReport} {
		if _, err := admin.js.Publish(ctx, events.EventSubject(k, "crawl-1"), []byte(`{"v":1,"kind":"`+string(k)+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	rec := ts.connect(t, "reconciler")
	rec.mustAllow(t, "follow the report events", func(ctx context.Context) error {
		cons, err := rec.js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.EventSubject(events.KindReport, ">")}})
		if err != nil {
			return err
		}
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return err
		}
		if m.Subject() != events.EventSubject(events.KindReport, "crawl-1") {
			return fmt.Errorf("got %s", m.Subject())
		}
		return nil
	})
	rec.mustDeny(t, "follow the lease grants", "$JS.API.CONSUMER.CREATE.EGRESS_LEASE_EVENTS.", func(ctx context.Context) error {
		_, err := rec.js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.EventSubject(events.KindLease, ">")}})
		return err
	})
}

// writeTLS writes a CA and a server certificate for 127.0.0.1 signed by it (usable for both
// client and route TLS, as the config requires), and returns the certificate, key and CA files.
func writeTLS(t *testing.T) (certFile, keyFile, caFile string) {
	t.Helper()
	f, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return f.Cert, f.Key, f.CA
}

// The leaser publishes its lease statistics and the viewer sums them; a crawler can do
// neither.
func TestLeaseStatsPermissions(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	declare(t, admin, map[string][]kvstore.HostConfig{"local": {{Name: "local", MaxConcurrentOps: 2}}})
	stats := events.LeaseStats{V: 1, Leaser: "m1", From: time.Now().Add(-time.Minute).UTC(), To: time.Now().UTC(),
		Rows: []events.LeaseStatsRow{{Proxy: "crawl-1", Target: "a.example", LeaseCounts: events.LeaseCounts{Granted: 2, Blocked: 1}}}}
	body, _ := json.Marshal(stats)
	leaser := ts.connect(t, "leaser")
	leaser.mustAllow(t, "publish its statistics", func(ctx context.Context) error {
		_, err := leaser.js.Publish(ctx, events.LeaseStatsSubject("m1"), body)
		return err
	})
	viewer := ts.connect(t, "viewer")
	viewer.mustAllow(t, "sum the statistics", func(ctx context.Context) error {
		sums, err := kvstore.SumLeaseStats(ctx, viewer.js, time.Now().Add(-time.Hour), time.Time{}, kvstore.ByTarget)
		if err != nil {
			return err
		}
		if len(sums) != 1 || sums[0].Target != "a.example" || sums[0].Granted != 2 || sums[0].Blocked != 1 {
			return fmt.Errorf("sums %+v", sums)
		}
		return nil
	})
	crawler := ts.connect(t, "crawler")
	crawler.mustDeny(t, "publish statistics", events.LeaseStatsSubject("m1"), func(ctx context.Context) error {
		_, err := crawler.js.Publish(ctx, events.LeaseStatsSubject("m1"), body)
		return err
	})
	crawler.mustDeny(t, "read the statistics", "$JS.API.CONSUMER.CREATE.EGRESS_LEASE_STATS.", func(ctx context.Context) error {
		_, err := kvstore.SumLeaseStats(ctx, crawler.js, time.Now().Add(-time.Hour), time.Time{}, kvstore.ByTarget)
		return err
	})
}
