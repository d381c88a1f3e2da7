package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/pools"
	"github.com/egressd/egressd/workers/prober"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/egressd/egressd/workers/reconciler"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRolesRunUnderTheirUsers is the other half of TestPermissions: the config must not only
// deny, it must let every role do all of its job. The real reconciler (two replicas, so one
// waits as a standby), provisioner (with the fake provider, its orphan GC and target checks),
// prober and leaser each run as their own user, binding the buckets admin declared; a proxy
// is provisioned, probed through a real CONNECT proxy, leased, renewed, reported, released and
// deleted; and the server must not have logged a single permission violation.
func TestRolesRunUnderTheirUsers(t *testing.T) {
	ts := startServer(t)
	admin := ts.connect(t, "admin")
	fake := checkingFake{providertest.NewFake("local", providers.Host{Name: "h1", MaxConcurrentOps: 2})}
	adminStore := declare(t, admin, map[string][]kvstore.HostConfig{"local": {{Name: "h1", MaxConcurrentOps: 2}}})

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // before the connections close (t.Cleanup)

	const installation = "inst-deploy-test" // created by declare
	var roles []*client
	role := func(user string) (*client, *kvstore.Store) {
		t.Helper()
		c := ts.connect(t, user)
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		defer bcancel()
		s, err := bindStore(bctx, c.js)
		if err != nil {
			t.Fatalf("%s binds the buckets: %v", user, err)
		}
		// Every process reads the installation ID admin created (cmd/egressd ensureInstallation).
		if id, _, err := kvstore.Get(bctx, s.Locks, events.KeyInstallation); err != nil || string(id) != installation {
			t.Fatalf("%s reads the installation id: %q, %v", user, id, err)
		}
		// ... and the roles that sign or deliver lease tokens the lease master (ensureLeaseMaster).
		if user != "reconciler" {
			if _, _, err := kvstore.Get(bctx, s.Locks, events.KeyLeaseMaster); err != nil {
				t.Fatalf("%s reads the lease master: %v", user, err)
			}
		}
		roles = append(roles, c)
		return c, s
	}

	// Provisioner: publishes its catalog (its half of today's Setup; admin declared the
	// stream and host consumers), then pulls ops, checks targets and collects orphans.
	_, ps := role("provisioner-local")
	if _, err := kvstore.PutJSON(ctx, ps.Catalog, "local", provisioner.CatalogRecord("local", fake.Catalog(), time.Now().UTC())); err != nil {
		t.Fatalf("provisioner-local publishes its catalog: %v", err)
	}
	// An orphan: this installation's instance that no proxy owns. The GC must delete it.
	if _, err := fake.Create(ctx, providers.CreateRequest{Name: "ghost", UID: "uid-ghost", Installation: installation,
		Host: "h1", Port: 3128}); err != nil {
		t.Fatal(err)
	}
	p, err := provisioner.New(provisioner.Config{Provider: "local", Backend: fake, Catalog: fake.Catalog(),
		Installation: installation, Worker: "prov-1", Buckets: provisioner.BucketsOf(ps), Log: log.With("role", "provisioner"),
		Timings: provisioner.Timings{LockTTL: 3 * time.Second, Heartbeat: time.Second, CreateBudget: 10 * time.Second,
			CallBudget: 5 * time.Second, LockBusyWait: 200 * time.Millisecond, FetchWait: time.Second},
		GC:     provisioner.GC{Interval: time.Second, MinAge: time.Millisecond},
		Checks: provisioner.Checks{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = p.Run(ctx) })

	// Two reconcilers: one leads, the other watches the leader lease.
	for i := range 2 {
		_, s := role("reconciler")
		r, err := reconciler.New(reconciler.Config{Buckets: reconciler.BucketsOf(s), Installation: installation, Holder: fmt.Sprintf("rec-%d", i),
			Policy: reconciler.Policy{ProvisioningPoll: 200 * time.Millisecond, DriftPoll: time.Second, DeletionPoll: 200 * time.Millisecond,
				QuotaRetry: time.Second, ProvisionDeadline: 30 * time.Second, MaxDeadlines: 3, BackoffBase: 100 * time.Millisecond,
				BackoffMax: time.Second, OpTimeout: 10 * time.Second, AddrMissLimit: 3},
			LeaderTTL: 2 * time.Second, Tick: 100 * time.Millisecond, Log: log.With("role", "reconciler", "holder", i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}

	// The pool controller, in the reconciler's process and under its user.
	_, pcs := role("reconciler")
	pcon, err := pools.New(pools.Config{Buckets: pools.BucketsOf(pcs), Holder: "rec-0", LeaderTTL: 2 * time.Second, Resync: 200 * time.Millisecond,
		Log: log.With("role", "pools")})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = pcon.Run(ctx) })

	// Prober, checking through the proxy against egressd's own echo endpoint.
	echo := httptest.NewServer(prober.EchoHandler())
	defer echo.Close()
	pc, pstore := role("prober")
	pr, err := prober.New(prober.Config{Buckets: prober.BucketsOf(pstore), NC: pc.nc, Worker: "prober-1", DefaultCheckURL: echo.URL + "/",
		Log: log.With("role", "prober")})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = pr.Run(ctx) })

	// Leaser.
	lc, lstore := role("leaser")
	ls, err := leaser.New(leaser.Config{Store: lstore, NC: lc.nc, Worker: "leaser-1", Log: log.With("role", "leaser")})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = ls.Run(ctx) })

	// The fake gives its instances the addresses 127.100.0.1, .2, ...: the orphan has the
	// first, the proxy will have the second, where a real forward proxy listens on the port
	// the spec asks for.
	const proxyIP = "127.100.0.2"
	port := startConnectProxy(t, proxyIP+":0")
	spec := fmt.Sprintf(`{"v":1,"provider":"local","port":%d,"cloudInitRef":"base","attributes":{"geo":"de"},"maxLeases":1,"healthCheck":{"intervalSeconds":1}}`, port)
	if _, err := adminStore.CloudInit.Put(ctx, "base", []byte("#cloud-config\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := adminStore.Proxies.Put(ctx, "web", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web to become Ready", 15*time.Second, func() (bool, string) {
		e, err := adminStore.Status.Get(ctx, "web")
		if err != nil {
			return false, err.Error()
		}
		var st events.ProxyStatus
		_ = json.Unmarshal(e.Value(), &st)
		return st.Phase == events.PhaseReady, string(e.Value())
	})

	// The provisioner created it from the shared user-data it read.
	if req, ok := fake.Request(instanceName(t, adminStore, "web")); !ok || string(req.UserData) != "#cloud-config\n" {
		t.Fatalf("the instance was not created from cloud_init/base: %v %q", ok, req.UserData)
	}

	// A crawler leases it, renews, reports a failure, and releases.
	crawler := ts.connect(t, "crawler")
	roles = append(roles, crawler)
	call := func(subject string, req any) json.RawMessage {
		t.Helper()
		b, _ := json.Marshal(req)
		var m []byte
		waitFor(t, "an answer on "+subject, 10*time.Second, func() (bool, string) {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			defer rcancel()
			msg, err := crawler.nc.RequestWithContext(rctx, subject, b)
			if err != nil {
				return false, err.Error()
			}
			if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
				return false, code + " " + string(msg.Data)
			}
			m = msg.Data
			return true, ""
		})
		return m
	}
	var lease events.LeaseReply
	if err := json.Unmarshal(call(events.LeaseAcquireSubject, events.AcquireRequest{Selector: map[string]string{"geo": "de"},
		Target: "example.com", TTLSeconds: 60, Holder: "crawler-1"}), &lease); err != nil || lease.Lease.ID == "" {
		t.Fatalf("acquire: %v %+v", err, lease)
	}
	if want := fmt.Sprintf("%s:%d", proxyIP, port); !strings.Contains(lease.Lease.URL, want) {
		t.Fatalf("lease URL %q does not point at %s", lease.Lease.URL, want)
	}
	call(events.LeaseRenewSubject, events.RenewRequest{ID: lease.Lease.ID, TTLSeconds: 60})
	call(events.LeaseReportSubject, events.ReportRequest{ID: lease.Lease.ID, Result: events.ReportFailed, Target: "example.com"}) // cools down, asks for a probe
	call(events.LeaseReleaseSubject, events.ReleaseRequest{ID: lease.Lease.ID})

	// The provider's target check landed, and the proxy is deleted to the end.
	waitFor(t, "the check of local.h1", 10*time.Second, func() (bool, string) {
		_, err := adminStore.Providers.Get(ctx, "local.h1")
		return err == nil, fmt.Sprint(err)
	})
	if err := adminStore.Proxies.Delete(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web's status to be removed", 15*time.Second, func() (bool, string) {
		_, err := adminStore.Status.Get(ctx, "web")
		return errors.Is(err, jetstream.ErrKeyNotFound), fmt.Sprint(err)
	})
	// Its health record goes with it (the reconciler removes it), not at its TTL.
	waitFor(t, "web's health record to be removed", 5*time.Second, func() (bool, string) {
		_, err := adminStore.Health.Get(ctx, "web")
		return errors.Is(err, jetstream.ErrKeyNotFound), fmt.Sprint(err)
	})

	// A pool: its controller writes the member into proxies and its ledger into pool_status,
	// and deletes both with the pool.
	if _, err := adminStore.Pools.Put(ctx, "fleet", []byte(fmt.Sprintf(`{"template":{"provider":"local","port":%d},"replicas":1}`, port))); err != nil {
		t.Fatal(err)
	}
	member := func() (string, bool) {
		keys, err := adminStore.Proxies.Keys(ctx)
		if err != nil {
			return "", false
		}
		for _, k := range keys {
			if strings.HasPrefix(k, "fleet-") {
				return k, true
			}
		}
		return "", false
	}
	waitFor(t, "the pool's member", 15*time.Second, func() (bool, string) {
		_, ok := member()
		_, err := adminStore.PoolStatus.Get(ctx, "fleet")
		return ok && err == nil, fmt.Sprint(err)
	})
	if err := adminStore.Pools.Delete(ctx, "fleet"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool's member deleted and its ledger emptied", 15*time.Second, func() (bool, string) {
		name, ok := member()
		var st events.PoolStatus
		_, err := kvstore.GetJSON(ctx, adminStore.PoolStatus, "fleet", &st)
		tombstone := err == nil && st.Phase == events.PoolDeleting && len(st.Members) == 0
		return !ok && (tombstone || errors.Is(err, kvstore.ErrNotFound)), name
	})

	waitFor(t, "the orphan to be collected", 10*time.Second, func() (bool, string) {
		_, ok := fake.Request("ghost")
		return !ok, "ghost still exists"
	})

	// Every role published its kind of event.
	stored := map[string]uint64{}
	for _, name := range []string{events.StreamEvents, events.StreamLeaseEvents} {
		stream, err := admin.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.EventsSubjects))
		if err != nil {
			t.Fatal(err)
		}
		for subj, n := range info.State.Subjects {
			if events.EventStream(events.EventKind(strings.Split(subj, ".")[2])) != name {
				t.Errorf("%s stored on %s", subj, name)
			}
			stored[subj] += n
		}
	}
	for _, subj := range []string{"egress.events.pool.fleet", "egress.events.phase.web", "egress.events.op.web", "egress.events.deleted.web",
		"egress.events.health.web", "egress.events.lease.web", "egress.events.report.web", "egress.events.provider.local", "egress.events.gc.local"} {
		if stored[subj] == 0 {
			t.Errorf("no event on %s; events: %v", subj, stored)
		}
	}

	// Stop every role: a watch that could not delete its consumer would show here as a
	// violation too.
	cancel()
	wg.Wait()
	for _, c := range roles {
		if err := c.nc.FlushTimeout(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if v := ts.log.all(); len(v) > 0 {
		t.Errorf("the server denied the roles %d times; the config must allow what they do:\n  %s", len(v), strings.Join(v, "\n  "))
	}
	for _, c := range roles {
		if v := c.allViolations(); len(v) > 0 {
			t.Errorf("%s was denied: %q", c.user, v)
		}
	}
}

// instanceName reads the instance name the reconciler gave a proxy.
func instanceName(t *testing.T, store *kvstore.Store, proxy string) string {
	t.Helper()
	var st events.ProxyStatus
	if _, err := kvstore.GetJSON(context.Background(), store.Status, proxy, &st); err != nil {
		t.Fatal(err)
	}
	return st.InstanceName
}

// checkingFake is the fake provider with a target check, so the provisioner's check loop
// (provider_health, provider events) runs too.
type checkingFake struct{ *providertest.Fake }

func (f checkingFake) Check(ctx context.Context) []providers.TargetStatus {
	return []providers.TargetStatus{{Name: "h1", Ready: true, Reason: "Reachable", Latency: time.Millisecond}}
}

// startConnectProxy runs a minimal forward proxy (CONNECT only) on addr and returns its port.
func startConnectProxy(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen for the test proxy: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { tunnel(conn) })
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

func tunnel(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", req.Host, 5*time.Second)
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	<-done
}

// waitFor polls cond until it holds, or fails with the last state it reported.
func waitFor(t *testing.T, what string, budget time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(budget)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last state: %s", budget, what, last)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
