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
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	r := newPermRig(t)
	// In this order: a case may rely on what an earlier one did (an op pulled and acked).
	for _, c := range []struct {
		name string
		run  func(*testing.T, *permRig)
	}{
		{"no user, no access", permNoUserNoAccess},
		{"admin writes proxies and cloud_init", permAdminWritesProxiesAndCloudInit},
		{"crawler leases through the lease service", permCrawlerLeasesThroughTheLeaseService},
		{"crawler cannot write proxies", permCrawlerCannotWriteProxies},
		{"crawler cannot pull ops", permCrawlerCannotPullOps},
		{"crawler cannot impersonate the leaser or overhear replies", permCrawlerCannotImpersonateTheLeaserOr},
		{"provisioner of local pulls and acks its ops", permProvisionerOfLocalPullsAndAcks},
		{"provisioner of local cannot pull kvm-home's ops", permProvisionerOfLocalCannotPullKvm},
		{"provisioner writes its own keys only", permProvisionerWritesItsOwnKeysOnly},
		{"every lease shard: the leaser writes it, the viewer and the reconciler read it, the crawler neither", permEveryLeaseShardTheLeaserWrites},
		{"the lease master: provisioner, prober and leaser read it, nobody but admin writes it, viewer, crawler and reconciler cannot read it", permTheLeaseMasterProvisionerProberAnd},
		{"lease keys reports: a provisioner writes its provider's, a viewer reads them", permLeaseKeysReports},
		{"the leaser keeps holder slots and sessions in lease_state and reads the pools, the crawler neither", permTheLeaserKeepsHolderSlotsAnd},
		{"viewer reads proxy_status but cannot write it", permViewerReadsProxyStatusButCannot},
		{"viewer follows events but not the reconciler's consumer", permViewerFollowsEventsButNotThe},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, r) })
	}
}

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
		sums, err := fleet.SumLeaseStats(ctx, viewer.js, time.Now().Add(-time.Hour), time.Time{}, fleet.ByTarget)
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
		_, err := fleet.SumLeaseStats(ctx, crawler.js, time.Now().Add(-time.Hour), time.Time{}, fleet.ByTarget)
		return err
	})
}
